package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// prestopRun is what one `meshdrain prestop --dry-run` cost.
type prestopRun struct {
	cpu       time.Duration // user+system
	polls     int           // from its final event
	peakRSSKB int64
}

// prestopCost runs the real prestop process dry against the emulator twice, 2s and 6s: the
// difference of their CPU over the difference of their polls is the CPU of one poll (in
// milliseconds), without the process's start. It returns that, the longer run's polls and
// the peak RSS of both.
func prestopCost(ctx context.Context, bin, admin string) (cpuPerPollMS float64, polls int, peakRSSKB int64, err error) {
	short, err := runPrestop(ctx, bin, admin, "2s")
	if err != nil {
		return 0, 0, 0, err
	}
	long, err := runPrestop(ctx, bin, admin, "6s")
	if err != nil {
		return 0, 0, 0, err
	}
	if long.polls <= short.polls {
		return 0, 0, 0, fmt.Errorf("prestop polled %d then %d times", short.polls, long.polls)
	}
	cpuPerPollMS = float64((long.cpu - short.cpu).Microseconds()) / 1000 / float64(long.polls-short.polls)
	return cpuPerPollMS, long.polls, max(short.peakRSSKB, long.peakRSSKB), nil
}

// runPrestop runs prestop --dry-run for d, polling every 20 ms.
func runPrestop(ctx context.Context, bin, admin, d string) (prestopRun, error) {
	pre := exec.CommandContext(ctx, bin, "prestop", "--admin", admin, "--dry-run", "--grace-period", "10s", "--deadline", d,
		"--min-wait", d, "--poll", "20ms", "--connect-timeout", "5s", "--log-format", "json")
	var stderr bytes.Buffer
	pre.Stderr = &stderr
	if err := pre.Start(); err != nil {
		return prestopRun{}, fmt.Errorf("--meshdrain-bin: %w", err)
	}
	peak, err := waitWatchingRSS(pre)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return prestopRun{}, fmt.Errorf("prestop: %w", err)
	}
	polls := finalPolls(stderr.Bytes())
	if polls == 0 {
		return prestopRun{}, fmt.Errorf("prestop reported no polls: %s", stderr.String())
	}
	return prestopRun{cpu: pre.ProcessState.UserTime() + pre.ProcessState.SystemTime(), polls: polls, peakRSSKB: peak}, nil
}

// waitWatchingRSS waits for a started command and returns its peak RSS in KiB with Wait's
// error. The peak is read from /proc (VmHWM) while the process lives, because a child's
// rusage maxrss counts the parent's pages it shared before exec, and /proc/PID is gone once
// it has exited.
func waitWatchingRSS(cmd *exec.Cmd) (int64, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var peak int64
	for {
		select {
		case err := <-done:
			return peak, err
		case <-tick.C:
			peak = max(peak, vmHWM(cmd.Process.Pid))
		}
	}
}

// vmHWM is a process's peak resident set in KiB, from /proc/PID/status; 0 when unknown.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// finalPolls reads the polls field of prestop's final event.
func finalPolls(stderr []byte) int {
	lines := bytes.Split(stderr, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var ev struct {
			Msg   string `json:"msg"`
			Polls int    `json:"polls"`
		}
		if json.Unmarshal(lines[i], &ev) == nil && ev.Msg == "drain finished" {
			return ev.Polls
		}
	}
	return 0
}
