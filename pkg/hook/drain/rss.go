package drain

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// peakRSSKiB is the process's peak resident memory (VmHWM in /proc/self/status, KiB): the
// high-water mark of its own address space since exec. (getrusage's maxrss is not usable for
// this: Linux folds the parent's resident size at vfork+exec into it, so a hook started by a
// large process would report that process's size.)
func peakRSSKiB() (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kib, err == nil
		}
	}
	return 0, false
}

// PeakRSSField is a final event's peak_rss_kib, null where /proc is unavailable: prestop's,
// and hold's (package hold), so both hooks report their memory the same way.
func PeakRSSField() zap.Field {
	if kib, ok := peakRSSKiB(); ok {
		return zap.Int64("peak_rss_kib", kib)
	}
	return zap.Reflect("peak_rss_kib", nil)
}
