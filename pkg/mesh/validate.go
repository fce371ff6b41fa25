package mesh

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Validate rejects a selection that could never match a stat: a port out of range, or a
// cluster or HTTP prefix name that is empty, not UTF-8, or holds spaces or control
// characters (Envoy stat names have none; such a name would also make the filter sent to
// Envoy invalid, and every poll a 400).
func (s Selector) Validate() error {
	for _, p := range s.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("port %d: not a port number", p)
		}
	}
	for _, group := range []struct {
		flag  string
		names []string
	}{{"cluster", s.Clusters}, {"http-prefix", s.HTTPPrefixes}} {
		for _, name := range group.names {
			if err := checkStatName(name); err != nil {
				return fmt.Errorf("%s %q: %w", group.flag, name, err)
			}
		}
	}
	return nil
}

func checkStatName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("holds a space or control character")
		}
	}
	return nil
}
