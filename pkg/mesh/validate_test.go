package mesh

import "testing"

func TestSelectorValidate(t *testing.T) {
	for _, sel := range []Selector{{}, {Ports: []int{1, 65535}}, {Clusters: []string{"local_app"}, HTTPPrefixes: []string{"public_listener"}}} {
		if err := sel.Validate(); err != nil {
			t.Errorf("%+v: %v", sel, err)
		}
	}
	for _, sel := range []Selector{{Ports: []int{0}}, {Ports: []int{70000}}, {Clusters: []string{""}},
		{HTTPPrefixes: []string{"\xe9"}}, {Clusters: []string{"local app"}}, {HTTPPrefixes: []string{"a\nb"}}} {
		if sel.Validate() == nil {
			t.Errorf("%+v accepted", sel)
		}
	}
}
