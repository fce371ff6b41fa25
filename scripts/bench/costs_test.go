package main

import (
	"os"
	"strings"
	"testing"
)

// What `meshdrain-sim emulate` prints at start, with a log line between: the bench must find
// the admin URL and every inbound address, whatever else is printed.
func TestReadEmulator(t *testing.T) {
	out := "admin: http://127.0.0.1:40001\n" +
		"{\"level\":\"info\",\"msg\":\"emulator started\"}\n" +
		"inbound 8080: 127.0.0.1:40002 -> 127.0.0.1:9\n" +
		"inbound 8081: 127.0.0.1:40003 -> 127.0.0.1:9\n" +
		"never read\n"
	admin, inbounds, err := readEmulator(strings.NewReader(out), 2)
	if err != nil {
		t.Fatal(err)
	}
	if admin != "http://127.0.0.1:40001" || strings.Join(inbounds, ",") != "127.0.0.1:40002,127.0.0.1:40003" {
		t.Errorf("admin %q, inbounds %q", admin, inbounds)
	}
	if _, _, err := readEmulator(strings.NewReader(out), 3); err == nil {
		t.Error("an emulator that printed 2 of 3 inbound addresses was accepted")
	}
}

func TestFinalPolls(t *testing.T) {
	stderr := `{"level":"info","msg":"drain started","polls":0}
{"level":"info","msg":"drain finished","reason":"deadline","polls":228}
`
	if got := finalPolls([]byte(stderr)); got != 228 {
		t.Errorf("finalPolls = %d, want 228", got)
	}
	if got := finalPolls([]byte(`{"msg":"drain started","polls":3}`)); got != 0 {
		t.Errorf("finalPolls without a final event = %d, want 0", got)
	}
}

// /proc of this test's own process: it has a stat to read and a resident set.
func TestProcReadings(t *testing.T) {
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("procCPU of this process: %v", err)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("procCPU of no process gave no error")
	}
	if kb := vmHWM(os.Getpid()); kb <= 0 {
		t.Errorf("vmHWM of this process = %d KiB", kb)
	}
}

func TestMedian(t *testing.T) {
	if got := median([]float64{9, 1, 4, 2, 100}); got != 4 {
		t.Errorf("median = %g, want 4", got)
	}
	if got := median(nil); got != 0 {
		t.Errorf("median(nil) = %g", got)
	}
}
