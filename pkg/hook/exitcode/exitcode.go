// Package exitcode is the hooks' exit-code contract, prestop's and hold's alike. The kubelet
// records a FailedPreStopHook event for any code but 0, so a code is what an operator sees
// of a hook without its logs: the codes, and the two rules that raise a reason's code (a
// failure after a decision that went well, a run that went on degraded), are defined here
// once. Each hook lists its reasons in a Table, which its ExitCode, its --help and the tests
// that hold the README and docs/hold.md to the code all read.
package exitcode

// The codes. A hook's reasons each take one; FailedAfter and ConfigError also override a
// reason's.
const (
	OK = 0
	// FailedAfter: the hook decided with a reason of code 0, but what it does once decided
	// failed (prestop's actions, hold's drain call).
	FailedAfter = 1
	// ConfigError: the configuration could not be used (the fail-safe path ran), or the hook
	// ran degraded (an unusable --log-file, hold's channel).
	ConfigError = 2
	// Deadline: the hook's deadline came before its reason.
	Deadline = 3
	// NoSignal: prestop found nothing to watch.
	NoSignal = 4
	// SidecarGoneBusy: prestop's sidecar stopped under live traffic.
	SidecarGoneBusy = 5
	// Interrupted: the hook itself got SIGINT, SIGTERM or SIGHUP.
	Interrupted = 130
)

// Row documents one way a hook ends: its reason, as in the final event, its code, and when.
type Row[R ~string] struct {
	Reason R
	Code   int
	When   string
}

// Ends is the row of a reason that ends a hook with code.
func Ends[R ~string](reason R, code int, when string) Row[R] {
	return Row[R]{Reason: reason, Code: code, When: when}
}

// Line is a row of the table as printed: a reason, or the FailedAfter row, whose label is not
// a reason ("(action failed)").
type Line struct {
	Code  int
	Label string
	When  string
}

// Table is one hook's contract: its reasons, in the order of the contract, and what its
// FailedAfter row says.
type Table[R ~string] struct {
	reasons     []Row[R]
	failedAfter Line
}

// NewTable is a hook's contract; failedLabel and failedWhen word its FailedAfter row.
func NewTable[R ~string](failedLabel, failedWhen string, reasons ...Row[R]) Table[R] {
	return Table[R]{reasons: reasons, failedAfter: Line{Code: FailedAfter, Label: failedLabel, When: failedWhen}}
}

// Reasons returns every reason with its code, in the order of the contract.
func (t Table[R]) Reasons() []Row[R] { return append([]Row[R](nil), t.reasons...) }

// FailedAfter is the row that is not a reason.
func (t Table[R]) FailedAfter() Line { return t.failedAfter }

// Code is a reason's code (0 for one the table does not have).
func (t Table[R]) Code(reason R) int {
	for _, row := range t.reasons {
		if row.Reason == reason {
			return row.Code
		}
	}
	return OK
}

// Outcome is the exit code of a hook that ended with reason: the reason's, FailedAfter where
// that is 0 but what the hook does once decided failed, and at least ConfigError where the
// hook ran degraded.
func (t Table[R]) Outcome(reason R, failedAfter, degraded bool) int {
	code := t.Code(reason)
	if code == OK && failedAfter {
		code = FailedAfter
	}
	if degraded && code < ConfigError {
		code = ConfigError
	}
	return code
}

// Lines is the table as --help prints it: the reasons in the order of the contract, with the
// FailedAfter row before the first reason of a higher code.
func (t Table[R]) Lines() []Line {
	lines := make([]Line, 0, len(t.reasons)+1)
	placed := false
	for _, row := range t.reasons {
		if !placed && row.Code > FailedAfter {
			lines, placed = append(lines, t.failedAfter), true
		}
		lines = append(lines, Line{Code: row.Code, Label: string(row.Reason), When: row.When})
	}
	if !placed {
		lines = append(lines, t.failedAfter)
	}
	return lines
}
