package drain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PIDFileReadTimeout bounds reading a pid file at start: a regular file reads at once, but a
// pid file on a hung network or FUSE mount must not hold the hook.
const PIDFileReadTimeout = time.Second

// maxPIDFileBytes is more than any pid file holds ("4194304\n"); a longer file is not one.
const maxPIDFileBytes = 32

// ReadPIDFile reads a pid from path within ctx. It opens without blocking and insists on a
// regular file, so a FIFO (which would block the open or the read until a writer came) or a
// device such as /dev/zero (which would never end) is refused rather than waited on.
func ReadPIDFile(ctx context.Context, path string) (int, error) {
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		pid, err := readPIDFileNow(path)
		done <- result{pid, err}
	}()
	select {
	case r := <-done:
		return r.pid, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("pid file %s: not read in time: %w", path, ctx.Err())
	}
}

func readPIDFileNow(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return 0, fmt.Errorf("pid file %s: not a regular file (%s)", path, info.Mode().Type())
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxPIDFileBytes+1))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", path, err)
	}
	if len(raw) > maxPIDFileBytes {
		return 0, fmt.Errorf("pid file %s: more than %d bytes: not a pid file", path, maxPIDFileBytes)
	}
	text := strings.TrimSpace(string(raw))
	pid, err := strconv.Atoi(text)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: no valid pid in %q", path, text)
	}
	return pid, nil
}

// procRoot is where /proc is read from (tests point it elsewhere).
var procRoot = "/proc"

// ProcessStartTime reads a process's start time (field 22 of /proc/PID/stat, in clock ticks
// since boot). A pid can be reused by another process once its owner exits; the pair (pid,
// start time) cannot, which is how meshdrain recognises the process it identified at start.
func ProcessStartTime(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", procRoot, pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("no process with pid %d", pid)
		}
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return parseStartTime(raw)
}

// parseStartTime extracts field 22 from a /proc/PID/stat line. The command name (field 2) is
// in parentheses and may itself hold spaces and parentheses, so fields are counted from the
// last ')'.
func parseStartTime(stat []byte) (uint64, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("malformed /proc stat: no command name")
	}
	fields := strings.Fields(string(stat[end+1:]))
	// fields[0] is field 3 (state), so field 22 is fields[19].
	const startTimeIndex = 22 - 3
	if len(fields) <= startTimeIndex {
		return 0, fmt.Errorf("malformed /proc stat: %d fields after the command name", len(fields))
	}
	start, err := strconv.ParseUint(fields[startTimeIndex], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed /proc stat start time %q", fields[startTimeIndex])
	}
	return start, nil
}

// identifiedProcess is a process recognised at start: its pid, its start time, and a handle
// that on Linux >= 5.3 holds a pidfd, through which a signal reaches exactly this process or
// fails if it has exited, even when its pid has been reused since.
type identifiedProcess struct {
	pid       int
	startTime uint64
	handle    *os.Process
}

// identify checks that pid names a process meshdrain may signal and records who it is.
func identify(pid int) (*identifiedProcess, error) {
	switch {
	case pid <= 0:
		return nil, fmt.Errorf("pid %d: not a process id (0 and negative pids name process groups)", pid)
	case pid == os.Getpid():
		return nil, fmt.Errorf("pid %d is meshdrain itself", pid)
	}
	start, err := ProcessStartTime(pid)
	if err != nil {
		return nil, err
	}
	// Signal 0 checks existence and permission without signalling.
	if err := syscall.Kill(pid, 0); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("pid %d: meshdrain may not signal it (another user's process)", pid)
		}
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	handle, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return &identifiedProcess{pid: pid, startTime: start, handle: handle}, nil
}

// signal sends sig if the process is still the one identified at start.
func (p *identifiedProcess) signal(sig syscall.Signal) error {
	start, err := ProcessStartTime(p.pid)
	if err != nil {
		return fmt.Errorf("the process identified at start has exited: %w", err)
	}
	if start != p.startTime {
		return fmt.Errorf("pid %d now belongs to another process (start time %d, was %d at start): refusing to signal it", p.pid, start, p.startTime)
	}
	if err := p.handle.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("pid %d: the process identified at start has exited", p.pid)
		}
		return fmt.Errorf("kill -%d %d: %w", int(sig), p.pid, err)
	}
	return nil
}
