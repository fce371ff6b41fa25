package lag_test

import (
	"testing"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/operator/lag"
)

// The reader's names are the final event's: pkg/hook/drain defines them, and lag keeps its
// own copies only so that it links nothing of the hook.
func TestEvidenceNamesAreTheFinalEvents(t *testing.T) {
	for _, pair := range [][2]string{
		{lag.EvidenceLetGo, drain.EvidenceLetGo},
		{lag.EvidenceLastNewConnection, drain.EvidenceLastNewConnection},
		{lag.EvidenceLastRequest, drain.EvidenceLastRequest},
		{lag.CutDeadline, drain.Result{Reason: drain.ReasonDeadline}.CutBy()},
		{lag.CutLagBound, drain.Result{WindowTerm: drain.TermLagBound}.CutBy()},
	} {
		if pair[0] != pair[1] {
			t.Errorf("lag reads %q, the final event writes %q", pair[0], pair[1])
		}
	}
}
