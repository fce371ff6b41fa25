package cli

import (
	"errors"
	"testing"
	"time"
)

// The deadline is what ties the wait to the pod's grace period: derived by default, checked
// when given, and the actions get the app's drain time (at least 2s).
func TestPrestopDeadlineAndActionTimeout(t *testing.T) {
	tests := []struct {
		name           string
		grace, drain   time.Duration
		deadline       time.Duration
		deadlineSet    bool
		wantDeadline   time.Duration
		wantActionTime time.Duration
		wantUsage      bool
	}{
		{name: "defaults", grace: 30 * time.Second, drain: 5 * time.Second, wantDeadline: 24 * time.Second, wantActionTime: 5 * time.Second},
		{name: "short app drain", grace: 15 * time.Second, drain: time.Second, wantDeadline: 13 * time.Second, wantActionTime: 2 * time.Second},
		{name: "no room", grace: 5 * time.Second, drain: 5 * time.Second, wantUsage: true},
		{name: "explicit", grace: 30 * time.Second, drain: 5 * time.Second, deadline: 10 * time.Second, deadlineSet: true, wantDeadline: 10 * time.Second, wantActionTime: 5 * time.Second},
		{name: "explicit beyond grace", grace: 30 * time.Second, drain: 5 * time.Second, deadline: 31 * time.Second, deadlineSet: true, wantUsage: true},
		{name: "explicit zero", grace: 30 * time.Second, drain: 5 * time.Second, deadline: 0, deadlineSet: true, wantUsage: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultPrestopOptions()
			o.gracePeriod, o.appDrain, o.deadline, o.deadlineSet = tc.grace, tc.drain, tc.deadline, tc.deadlineSet
			cfg, err := o.validate()
			var exitErr *ExitError
			if tc.wantUsage {
				if !errors.As(err, &exitErr) || exitErr.Code != ExitUsage {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Deadline != tc.wantDeadline || cfg.ActionTimeout != tc.wantActionTime {
				t.Errorf("deadline %v action timeout %v, want %v and %v", cfg.Deadline, cfg.ActionTimeout, tc.wantDeadline, tc.wantActionTime)
			}
		})
	}
}
