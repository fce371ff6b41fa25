package exitcode

import (
	"fmt"
	"testing"
)

type reason string

var table = NewTable("(after failed)", "after",
	Ends[reason]("ok", OK, "fine"),
	Ends[reason]("bad", ConfigError, "config"),
	Ends[reason]("late", Deadline, "deadline"))

// A failure after a good decision raises only a 0; a degraded run raises anything below 2.
func TestOutcomeRaisesTheReasonsCode(t *testing.T) {
	tests := []struct {
		reason              reason
		failedAfter, degrad bool
		want                int
	}{
		{"ok", false, false, OK},
		{"ok", true, false, FailedAfter},
		{"ok", false, true, ConfigError},
		{"ok", true, true, ConfigError},
		{"late", true, false, Deadline},
		{"late", false, true, Deadline},
		{"bad", true, false, ConfigError},
		{"unknown", false, false, OK},
	}
	for _, tc := range tests {
		if got := table.Outcome(tc.reason, tc.failedAfter, tc.degrad); got != tc.want {
			t.Errorf("Outcome(%s, failed after %v, degraded %v) = %d, want %d", tc.reason, tc.failedAfter, tc.degrad, got, tc.want)
		}
	}
}

// The printed table puts the failed-after row where its code falls.
func TestLinesPlaceTheFailedAfterRowByItsCode(t *testing.T) {
	got := fmt.Sprint(table.Lines())
	want := "[{0 ok fine} {1 (after failed) after} {2 bad config} {3 late deadline}]"
	if got != want {
		t.Errorf("lines %s\nwant  %s", got, want)
	}
}
