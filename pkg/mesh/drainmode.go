package mesh

import "fmt"

// DrainMode says how /drain_listeners is called.
type DrainMode string

// Drain modes of meshdrain's --drain-mode.
const (
	// DrainGraceful keeps the inbound listeners accepting for Envoy's drain time while every
	// response tells its connection to close, so clients reconnect elsewhere.
	DrainGraceful DrainMode = "graceful"
	// DrainImmediate stops the inbound listeners at once: new connections are refused.
	DrainImmediate DrainMode = "immediate"
	// DrainNone makes no call.
	DrainNone DrainMode = "none"
)

// ParseDrainMode validates a --drain-mode value.
func ParseDrainMode(s string) (DrainMode, error) {
	switch m := DrainMode(s); m {
	case DrainGraceful, DrainImmediate, DrainNone:
		return m, nil
	}
	return "", fmt.Errorf("drain mode %q: want graceful, immediate or none", s)
}
