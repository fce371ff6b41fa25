package sockets

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func littleEndian(t *testing.T) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the fixtures were captured on a little-endian host; /proc prints addresses in host order")
	}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// The fixtures in testdata/proc/net are lines of this machine's real /proc/net/tcp and tcp6,
// captured with a listener on 127.0.0.1:18080 and these clients: 127.0.0.2 with an idle
// connection and one carrying 5 bytes the server never read; 127.0.0.3 with one connection
// closed by the server first (TIME_WAIT) and one closed by the client (CLOSE_WAIT, whose
// rx_queue counts the FIN); 127.0.0.4 whose connection the server closed (FIN_WAIT2). The
// files also hold the client-side sockets, which a reader of port 18080 must leave out.
func TestProcReaderIPv4Fixture(t *testing.T) {
	littleEndian(t)
	got, err := ProcReader{Root: "testdata/proc"}.Read([]uint16{18080})
	if err != nil {
		t.Fatal(err)
	}
	want := []Socket{
		{Local: ap("127.0.0.1:18080"), Remote: ap("127.0.0.2:41827"), State: Established, Inode: 96146},
		{Local: ap("127.0.0.1:18080"), Remote: ap("127.0.0.2:35207"), State: Established, Inode: 96148, RxQueue: 5},
		{Local: ap("127.0.0.1:18080"), Remote: ap("127.0.0.4:51169"), State: FinWait2},
		{Local: ap("127.0.0.1:18080"), Remote: ap("127.0.0.3:60941"), State: CloseWait, Inode: 96991, RxQueue: 1},
		{Local: ap("127.0.0.1:18080"), Remote: ap("127.0.0.3:53351"), State: TimeWait},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
}

// Port 18443 listens on [::1]; 18444 on [::] and was reached by IPv4 client 127.0.0.5,
// which tcp6 shows as ::ffff:127.0.0.5 and the reader as plain 127.0.0.5.
func TestProcReaderIPv6Fixture(t *testing.T) {
	littleEndian(t)
	got, err := ProcReader{Root: "testdata/proc"}.Read([]uint16{18443, 18444})
	if err != nil {
		t.Fatal(err)
	}
	want := []Socket{
		{Local: ap("[::1]:18443"), Remote: ap("[::1]:36173"), State: Established, Inode: 96995},
		{Local: ap("127.0.0.1:18444"), Remote: ap("127.0.0.5:45969"), State: Established, Inode: 96997},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
}

func TestProcReaderMissingTCP6IsNotAnError(t *testing.T) {
	dir := t.TempDir()
	root := dir + "/proc"
	writeFile(t, root+"/net/tcp", "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n")
	got, err := ProcReader{Root: root}.Read([]uint16{80})
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v; want no sockets and no error", got, err)
	}
}

func TestProcReaderUnreadable(t *testing.T) {
	_, err := ProcReader{Root: t.TempDir()}.Read([]uint16{80})
	if err == nil || !strings.Contains(err.Error(), "net/tcp") {
		t.Fatalf("got %v, want an error naming net/tcp", err)
	}
}

func TestParseProcNetTCPRejectsMalformed(t *testing.T) {
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	for name, content := range map[string]string{
		"no header":     "",
		"wrong header":  "Inter-|   Receive\n",
		"short line":    header + "   0: 0100007F:46A0 0200007F:A363 01\n",
		"bad state":     header + "   0: 0100007F:46A0 0200007F:A363 ZZ 00000000:00000000 00:00000000 00000000 0 0 1 1\n",
		"bad address":   header + "   0: 0100007F:46A0 07F:A363 01 00000000:00000000 00:00000000 00000000 0 0 1 1\n",
		"bad queues":    header + "   0: 0100007F:46A0 0200007F:A363 01 00000000 00:00000000 00000000 0 0 1 1\n",
		"bad inode":     header + "   0: 0100007F:46A0 0200007F:A363 01 00000000:00000000 00:00000000 00000000 0 0 x 1\n",
		"port too wide": header + "   0: 0100007F:146A0 0200007F:A363 01 00000000:00000000 00:00000000 00000000 0 0 1 1\n",
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := parseProcNetTCP(strings.NewReader(content), []uint16{18080}, false, nil); err == nil {
				t.Errorf("no error; got %v", got)
			}
		})
	}
}

// An unwatched line is skipped on its local port alone, so the rest of it is not checked.
func TestParseProcNetTCPSkipsUnwatchedPorts(t *testing.T) {
	const content = "  sl  local_address\n   0: 0100007F:0050 nonsense 01 x x x x x x\n"
	got, err := parseProcNetTCP(strings.NewReader(content), []uint16{18080}, false, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v; want nothing", got, err)
	}
}
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The uid column is the socket's owner: the proxy's 1337 here, as in an Istio pod. The
// lines are the fixture's, with the uid changed.
func TestProcLinesCarryTheOwner(t *testing.T) {
	littleEndian(t)
	content := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:46A0 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1337        0 96139 2 0000000093851f19 100 0 0 10 0
   1: 0100007F:46A0 0200007F:A363 01 00000000:00000000 00:00000000 00000000  1337        0 96146 1 0000000093851f19 20 4 30 10 -1
`
	socks, err := parseProcNetTCP(strings.NewReader(content), []uint16{18080}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) != 1 || socks[0].State != Established || socks[0].UID != 1337 {
		t.Errorf("connections %+v, want one ESTABLISHED owned by 1337", socks)
	}
	listeners, err := parseProcNetTCP(strings.NewReader(content), []uint16{18080}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(listeners) != 1 || listeners[0].State != Listen || listeners[0].UID != 1337 || listeners[0].Local != ap("127.0.0.1:18080") {
		t.Errorf("listeners %+v, want 127.0.0.1:18080 owned by 1337", listeners)
	}
}
