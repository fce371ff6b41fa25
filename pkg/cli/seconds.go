package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// secondsValue is a duration flag that also takes a plain integer of seconds, the way
// kubectl's --grace-period and a pod's terminationGracePeriodSeconds say it: "52" and "52s"
// are the same grace period.
type secondsValue time.Duration

func (v *secondsValue) Set(s string) error {
	d, err := parseSecondsOrDuration(s)
	if err != nil {
		return err
	}
	*v = secondsValue(d)
	return nil
}

func (v *secondsValue) String() string { return time.Duration(*v).String() }

func (v *secondsValue) Type() string { return "duration" }

// secondsVar registers a secondsValue flag.
func secondsVar(f *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var((*secondsValue)(p), name, usage+` (a duration such as "52s", or whole seconds as in terminationGracePeriodSeconds: "52")`)
}

// parseSecondsOrDuration reads "52" as 52 seconds and anything else as a Go duration.
func parseSecondsOrDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(s)
}
