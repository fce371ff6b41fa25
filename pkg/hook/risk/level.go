package risk

import "fmt"

// DefaultLevel is the risk a drain accepts unless told otherwise (--risk): one drain in a
// thousand may stop while a client still routes to the pod.
const DefaultLevel = 1e-3

// MaxLevel is the largest risk a drain may accept: beyond one in two, the figure says the
// stop is more likely too early than not, and a fixed sleep is the honest setting.
const MaxLevel = 0.5

// CheckLevel says whether p is a risk a drain may accept: 0 < p <= MaxLevel. Zero asks for the
// distribution's last lag, which a lag bound (--eds-lag-bound) states already; NaN is no risk.
func CheckLevel(p float64) error {
	if !(p > 0 && p <= MaxLevel) {
		return fmt.Errorf("%v: want 0 < P <= %v, e.g. %v", p, MaxLevel, DefaultLevel)
	}
	return nil
}
