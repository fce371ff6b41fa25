package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The emulated pod the costs are measured on: the 10-port pod of issue 9's targets, in an
// Envoy that also holds 5000 outbound clusters (22 stats each: 110k stats), since a poll's
// cost is the admin's walk over every stat, not only the few it returns.
const (
	emulatorInbounds = 10
	emulatorClusters = 5000
)

// emulator is a running `meshdrain-sim emulate`: an Envoy admin API on loopback, and a
// process whose CPU /proc counts.
type emulator struct {
	cmd      *exec.Cmd
	admin    string   // the admin API's base URL
	inbounds []string // the listen addresses of the inbound ports
	client   *http.Client
}

// startEmulator starts the emulator and waits until it has said where it listens.
func startEmulator(ctx context.Context, simBin string) (*emulator, error) {
	args := []string{"emulate", "--admin", "http://127.0.0.1:0", "--agent", "none", "--extra-clusters", strconv.Itoa(emulatorClusters), "--log-format", "json"}
	for p := 8080; p < 8080+emulatorInbounds; p++ {
		args = append(args, "--inbound", fmt.Sprintf("%d=127.0.0.1:9", p))
	}
	cmd := exec.CommandContext(ctx, simBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("--sim-bin: %w", err)
	}
	emu := &emulator{cmd: cmd, client: &http.Client{Timeout: time.Minute}}
	if emu.admin, emu.inbounds, err = readEmulator(stdout, emulatorInbounds); err != nil {
		emu.stop()
		return nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return emu, nil
}

func (e *emulator) stop() {
	_ = e.cmd.Process.Kill()
	_ = e.cmd.Wait()
}

// readEmulator reads the emulator's admin URL and the listen addresses of its n inbound ports
// from what it prints at start ("admin: URL", then "inbound PORT: ADDR -> APP").
func readEmulator(r io.Reader, n int) (string, []string, error) {
	var admin string
	var inbounds []string
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		line := scanner.Text()
		if u, ok := strings.CutPrefix(line, "admin: "); ok {
			admin = strings.TrimSpace(u)
		}
		if rest, ok := strings.CutPrefix(line, "inbound "); ok {
			if _, mapping, ok := strings.Cut(rest, ": "); ok {
				addr, _, _ := strings.Cut(mapping, " -> ")
				inbounds = append(inbounds, strings.TrimSpace(addr))
			}
		}
		if admin != "" && len(inbounds) == n {
			return admin, inbounds, nil
		}
	}
	return "", nil, fmt.Errorf("the emulator printed admin URL %q and %d of %d inbound addresses", admin, len(inbounds), n)
}

// useInbounds sends one request through every inbound port (its app refuses: a 503), so that
// their stats are used, as a serving pod's are, and the usedonly answer holds them.
func (e *emulator) useInbounds() {
	for _, addr := range e.inbounds {
		if resp, err := e.client.Get("http://" + addr + "/"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// get is one admin query's answer.
func (e *emulator) get(path string) ([]byte, error) {
	resp, err := e.client.Get(e.admin + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return body, err
}

// cpuMS is the emulator's user+system CPU so far, in milliseconds.
func (e *emulator) cpuMS() (int64, error) { return procCPU(e.cmd.Process.Pid) }

// procCPU is a process's user+system CPU in milliseconds, from /proc/PID/stat.
func procCPU(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return (utime + stime) * 1000 / ticksPerSecond, nil
}
