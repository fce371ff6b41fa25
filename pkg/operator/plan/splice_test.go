package plan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
)

// TestWriteDiffsScalarListsLineByLine: a list of scalars (a container's command) that the
// plan changes keeps the lines of the items it keeps, with their comments; an item removed
// leaves its comment where it was, a changed one keeps its comment on its line, and each
// such comment is named in a note.
func TestWriteDiffsScalarListsLineByLine(t *testing.T) {
	in := `kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
        - name: web
          command:
            - /meshdrain/meshdrain
            - prestop
            - --grace-period=60s  # raised after the Black Friday 503s
            - --deadline=40s      # the batch jobs
            - --drain-at=end      # our sidecar's own drain is off
            - --strict-active
            - --log-file=/proc/1/fd/1
`
	want := `kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
        - name: web
          command:
            - /meshdrain/meshdrain
            - prestop
            - --grace-period=60s  # raised after the Black Friday 503s
            - --eds-lag-bound=12s
            # the batch jobs
            - --drain-at=end      # our sidecar's own drain is off
            - --strict-active
            - --log-file=/proc/1/fd/1
`
	m, err := ReadManifests(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	cmd := yamlnode.Path(yamlnode.Resolve(m.docs[0].Content[0]), "spec", "template", "spec", "containers").Content[0]
	yamlnode.SetKey(cmd, "command", yamlnode.Sequence(yamlnode.Str("/meshdrain/meshdrain"), yamlnode.Str("prestop"), yamlnode.Str("--grace-period=60s"), yamlnode.Str("--eds-lag-bound=12s"),
		yamlnode.Str("--drain-at=end"), yamlnode.Str("--strict-active"), yamlnode.Str("--log-file=/proc/1/fd/1")))
	var out bytes.Buffer
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	if notes := m.Notes(); len(notes) != 1 || !strings.Contains(notes[0], `moved the comment "# the batch jobs" (line 13)`) {
		t.Errorf("notes %q: want one naming the moved comment", notes)
	}

	// A changed item keeps its comment on its line.
	m, _ = ReadManifests(strings.NewReader(want))
	cmd = yamlnode.Path(yamlnode.Resolve(m.docs[0].Content[0]), "spec", "template", "spec", "containers").Content[0]
	items := yamlnode.Lookup(cmd, "command").Content
	items[2] = yamlnode.Str("--grace-period=75s")
	out.Reset()
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "- --grace-period=75s  # raised after the Black Friday 503s\n") || strings.Count(out.String(), "\n") != strings.Count(want, "\n") {
		t.Errorf("a changed item lost its comment or moved lines:\n%s", out.String())
	}
	if notes := m.Notes(); len(notes) != 1 || !strings.Contains(notes[0], `kept the comment "# raised after the Black Friday 503s"`) {
		t.Errorf("notes %q: want one naming the kept comment", notes)
	}
}
