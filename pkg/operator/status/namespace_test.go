package status

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// fakeProc is a proc file system root with PID 1's name and the two network namespace links
// ("" leaves a link out: unreadable).
func fakeProc(t *testing.T, comm, self, pid1 string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"self/ns", "1/ns"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "1", "comm"), []byte(comm+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"self/ns/net": self, "1/ns/net": pid1} {
		if target == "" {
			continue
		}
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The namespace item says what it checked and what PID 1 shows, never "the pod's" on faith:
// a machine's own namespace (PID 1 systemd, shared) is named as one.
func TestNamespaceFoundSaysWhatWasChecked(t *testing.T) {
	ignore := []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}
	for _, c := range []struct {
		name, comm, self, pid1 string
		want, not              []string
	}{
		{"machine", "systemd", "net:[4026531840]", "net:[4026531840]",
			[]string{"no kubelet listens here (ports 10250, 10248)", "no --ignore-source address", "PID 1 is systemd, a machine's init", "a machine's own network namespace, not a pod's", "kubectl exec"}, nil},
		{"machine, unreadable", "systemd", "net:[4026531840]", "",
			[]string{"cannot be read to compare", "looks like a machine's own namespace"}, nil},
		{"pod", "java", "net:[4026532301]", "net:[4026532301]",
			[]string{"shared with PID 1 (java), as in a container"}, []string{"machine's own"}},
		{"own", "systemd", "net:[4026532301]", "net:[4026531840]",
			[]string{"a network namespace of its own (net:[4026532301]), not PID 1's (net:[4026531840]; PID 1 is systemd)"}, []string{"machine's own"}},
		{"cannot tell", "process_api", "net:[4026531840]", "",
			[]string{"a pod's or a machine's: cannot be told (PID 1 is process_api"}, []string{"machine's own"}},
	} {
		got := namespaceFound(fakeProc(t, c.comm, c.self, c.pid1), ignore)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.name, got, w)
			}
		}
		for _, n := range append(c.not, "the pod's own") {
			if strings.Contains(got, n) {
				t.Errorf("%s: %q says %q", c.name, got, n)
			}
		}
	}
}

// check --mesh none in whatever namespace the tests run in (not a pod's) does not call it the
// pod's own: its detail says what was checked.
func TestCheckKernelNamespaceDetail(t *testing.T) {
	items := CheckKernel(sockets.NewReader(), "", nil, nil)
	ns := items[0]
	if ns.Name != "namespace" {
		t.Fatalf("first item %+v", ns)
	}
	if !ns.OK {
		if err := kernel.CheckNamespace(sockets.NewReader(), nil); errors.Is(err, kernel.ErrHostNetwork) {
			t.Skipf("this machine's namespace is a node's: %v", err)
		}
		t.Fatalf("namespace item failed: %+v", ns)
	}
	if strings.Contains(ns.Detail, "the pod's own") || !strings.Contains(ns.Detail, "no kubelet listens here") {
		t.Errorf("namespace detail %q", ns.Detail)
	}
}
