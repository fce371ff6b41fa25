package plan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// gitopsCases are workloads shaped as teams keep them in Git (testdata/gitops), and the
// comments on lines plan -f -o yaml rewrites, which it keeps or moves and must name.
var gitopsCases = []struct {
	file, container string
	comments        []string // comments on rewritten lines, which the notes must name
	// onAnnotations: the comments are on the pod's annotations, which only a sidecar's plan
	// rewrites (a meshless plan sets none).
	onAnnotations bool
}{
	// Spring Boot with a `sh -c "sleep 15"` preStop, a header comment and `---`, lists
	// indented under their key, a comment on the grace period, a Service after it.
	{file: "spring-sleep.yaml", comments: []string{"# tuned after incident INC-1234"}},
	// An app and a log shipper (whose own sleep stays), an init container already there,
	// lists at their key's column, flow mappings.
	{file: "log-shipper.yaml", container: "search"},
	// ConfigMap (a literal with a # line), Deployment with the sleep action, Service, `...`.
	{file: "multi-doc.yaml", comments: []string{"# Kubernetes' own sleep action (1.30+)"}},
	// Four-space indentation, a YAML proxy config, a `bash -c` literal script.
	{file: "four-spaces.yaml"},
	// No pod metadata, `volumeMounts: []`, an empty `lifecycle:`, commented-out items, an
	// empty document, no newline at the end.
	{file: "bare-statefulset.yaml"},
	// `annotations: {}` with a comment, the grace period as the pod spec's last line.
	{file: "empty-annotations.yaml", comments: []string{"# none yet"}, onAnnotations: true},
}

// planFile runs what plan -f -o yaml runs, in regime (b), plan's default.
func planFile(t *testing.T, in []byte, workload, container string) (out []byte, notes []string, e *Edit) {
	t.Helper()
	return planFileIn(t, in, workload, container, true)
}

// planFileIn runs what plan -f -o yaml runs, deferring the sidecar's drain or not.
func planFileIn(t *testing.T, in []byte, workload, container string, deferDrain bool) (out []byte, notes []string, e *Edit) {
	t.Helper()
	return planFileFor(t, in, workload, container, deferDrain, mesh.Istio)
}

// planFileFor runs what plan -f -o yaml runs for mesh m: Istio in either regime, or a pod
// without a sidecar (mesh.None, Ambient) on the app container's ports (8080 where it names none).
func planFileFor(t *testing.T, in []byte, workload, container string, deferDrain bool, m mesh.Mesh) (out []byte, notes []string, e *Edit) {
	t.Helper()
	manifests, err := ReadManifests(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	w, err := manifests.Workload(workload, container)
	if err != nil {
		t.Fatal(err)
	}
	input := Input{P99: 450 * ms, EDSLag: 12 * s, EDSLagMedian: 1500 * ms, Clients: 50, AppDrain: 5 * s, Sidecar: Classic, CurrentGracePeriod: w.GracePeriod,
		DeferSidecarDrain: deferDrain}
	if sc, _ := w.Sidecar(); sc != "" {
		input.Sidecar = sc
	}
	if d, err := w.DrainDuration(); err == nil && d > 0 {
		input.DrainDuration = d
	}
	if IsMeshless(m) {
		input.Mesh, input.Sidecar, input.Ports = m, "", w.Ports
		if ports := w.PrestopFlagValues("port"); len(ports) > 0 {
			input.Ports = nil
			for _, p := range ports {
				var port int
				if _, err := fmt.Sscan(p, &port); err != nil {
					t.Fatal(err)
				}
				input.Ports = append(input.Ports, port)
			}
		}
		if len(input.Ports) == 0 {
			input.Ports = []int{8080}
		}
	}
	e, err = NewEdit(mustRecommend(t, input), PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}, w)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := manifests.Write(&buf); err != nil {
		t.Fatal(err)
	}
	// What the tree says must be what the bytes say: the whole tree, encoded as before.
	var encoded bytes.Buffer
	enc := yaml.NewEncoder(&encoded)
	for _, doc := range manifests.docs {
		if err := enc.Encode(doc); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := decodeAll(t, buf.Bytes()), decodeAll(t, encoded.Bytes()); !reflect.DeepEqual(got, want) {
		t.Fatalf("the spliced manifests say something else than the planned tree:\n%s\n--- tree:\n%s", buf.String(), encoded.String())
	}
	return buf.Bytes(), manifests.Notes(), e
}

// TestWriteChangesOnlyPlannedLines: `diff` of a manifest and plan's output shows only the
// planned fields; every other line, comment, separator and document is the input's.
func TestWriteChangesOnlyPlannedLines(t *testing.T) {
	for _, c := range gitopsCases {
		for _, deferDrain := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/regime-b=%v", c.file, deferDrain), func(t *testing.T) {
				checkGitopsCase(t, c.file, c.container, c.comments, deferDrain, mesh.Istio)
			})
		}
		// A pod without a sidecar: HOST_IP and, where the app has none, a readiness probe are
		// planned lines too; everything else stays, and a re-plan changes nothing.
		comments := c.comments
		if c.onAnnotations {
			comments = nil
		}
		t.Run(c.file+"/mesh-none", func(t *testing.T) { checkGitopsCase(t, c.file, c.container, comments, false, mesh.None) })
	}
}

// checkGitopsCase plans one of gitopsCases and checks the output against its input.
func checkGitopsCase(t *testing.T, file, container string, comments []string, deferDrain bool, m mesh.Mesh) {
	in, err := os.ReadFile(filepath.Join("testdata", "gitops", file))
	if err != nil {
		t.Fatal(err)
	}
	out, notes, e := planFileFor(t, in, "", container, deferDrain, m)
	checkOnlyPlannedLines(t, in, out, e, notes)
	checkStrict(t, out)
	// Each file indents one way throughout; what plan adds must too.
	if want := indentStyles(t, in); len(want) != 3 {
		t.Fatalf("testdata indents in several ways: %v", want)
	} else if got := indentStyles(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("the output indents %v, the input %v", got, want)
	}
	if len(notes) != len(comments) {
		t.Errorf("notes %q, want one for each of %q", notes, comments)
	}
	for i, d := range comments {
		if i < len(notes) && !strings.Contains(notes[i], d) {
			t.Errorf("note %q does not name the comment %q", notes[i], d)
		}
		if !bytes.Contains(out, []byte(d)) {
			t.Errorf("the comment %q is gone from the output", d)
		}
	}
	if IsMeshless(m) {
		checkMeshlessWorkload(t, out, e)
	}
	// A second plan over the output changes nothing.
	again, notes, _ := planFileFor(t, out, "", container, deferDrain, m)
	if !bytes.Equal(again, out) || len(notes) > 0 {
		t.Errorf("a second plan changed the output (notes %q):\n%s", notes, lineDiff(out, again))
	}
}

// TestWriteKeepsLineEndings: a file with CRLF line ends gets CRLF in what plan adds.
func TestWriteKeepsLineEndings(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "gitops", "spring-sleep.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crlf := bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n"))
	out, notes, e := planFile(t, crlf, "", "")
	if n := bytes.Count(out, []byte("\n")); n != bytes.Count(out, []byte("\r\n")) || n <= bytes.Count(crlf, []byte("\n")) {
		t.Errorf("%d line ends, %d of them CRLF; want all CRLF, and more lines than the input's", n, bytes.Count(out, []byte("\r\n")))
	}
	checkOnlyPlannedLines(t, bytes.ReplaceAll(crlf, []byte("\r"), nil), bytes.ReplaceAll(out, []byte("\r"), nil), e, notes)
}

// TestWriteFlowAndJSON: a manifest in flow style has no lines to keep apart; what plan writes
// still says what the plan says, and the other documents stay as they were. JSON comes out as
// YAML in block style.
func TestWriteFlowAndJSON(t *testing.T) {
	json := `{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
 "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "web:1"}]}}}}
---
{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
`
	for name, in := range map[string]string{"flow items": twoWorkloads, "json": json} {
		t.Run(name, func(t *testing.T) {
			out, _, _ := planFile(t, []byte(in), "deployment/web", "web")
			checkStrict(t, out)
			if name == "json" {
				// JSON has no lines of its own to keep: -o yaml writes YAML, in block style,
				// every document, ending with a newline.
				if strings.Contains(string(out), ": {") || strings.HasPrefix(string(out), "{") || !strings.Contains(string(out), "---\napiVersion: v1\nkind: Service\n") || !strings.HasSuffix(string(out), "\n") {
					t.Errorf("JSON in, want block YAML out:\n%s", out)
				}
				return
			}
			last := in[strings.LastIndex(in, "---"):]
			if !strings.HasSuffix(string(out), last) {
				t.Errorf("the last document changed:\n%s", out)
			}
		})
	}
}

// checkOnlyPlannedLines compares input and output line by line (a longest-common-subsequence
// diff, as `diff` does): each removed line must lie in a planned field of the input, each
// added line in a planned field of the output (or be a comment moved to just above one), and
// an added line is not blank. A comment on a removed line must be named by a note, and an
// added line carries no comment but one from the input that a note names (kept or moved).
func checkOnlyPlannedLines(t *testing.T, in, out []byte, e *Edit, notes []string) {
	t.Helper()
	w := e.workload
	inSpans := plannedSpans(t, in, in, w, e)
	outSpans := plannedSpans(t, in, out, w, e)
	removed, added := diffLines(lines(in), lines(out))
	if len(removed)+len(added) == 0 {
		t.Fatal("plan changed nothing")
	}
	for _, l := range removed {
		text := lines(in)[l-1]
		if !inSpans.has(l) {
			t.Errorf("input line %d %q changed, but is no planned field", l, text)
		}
		if i := strings.Index(text, "#"); i >= 0 {
			named := false
			for _, n := range notes {
				named = named || strings.Contains(n, strings.TrimSpace(text[i:]))
			}
			if !named {
				t.Errorf("input line %d %q: its comment is dropped without a note (notes %q)", l, text, notes)
			}
		}
	}
	for _, l := range added {
		text := lines(out)[l-1]
		comment := yamlnode.LineComment(text)
		moved := comment != "" && strings.TrimSpace(text) == comment
		if !outSpans.has(l) && !(moved && outSpans.has(l+1)) {
			t.Errorf("output line %d %q added, but is no planned field", l, text)
		}
		if strings.TrimSpace(text) == "" {
			t.Errorf("output line %d %q: plan adds no blank lines", l, text)
		}
		if comment == "" {
			continue
		}
		named := bytes.Contains(in, []byte(comment))
		if named {
			named = false
			for _, n := range notes {
				named = named || strings.Contains(n, comment) && (strings.Contains(n, "kept the comment") || strings.Contains(n, "moved the comment"))
			}
		}
		if !named {
			t.Errorf("output line %d %q: a comment plan adds must be the input's, kept or moved and named (notes %q)", l, text, notes)
		}
	}
	if t.Failed() {
		t.Logf("diff:\n%s", lineDiff(in, out))
	}
}

type spans [][2]int

func (s spans) has(line int) bool {
	for _, sp := range s {
		if line >= sp[0] && line <= sp[1] {
			return true
		}
	}
	return false
}

// plannedSpans are the lines of text that hold a field the plan sets in workload w. A field
// runs from its key (or its list item's first line) to the line before whatever follows
// it. Where the input lacks the field's parent, or has it empty, the span is the outermost
// part the plan added or filled.
func plannedSpans(t *testing.T, in, text []byte, w *Workload, e *Edit) spans {
	t.Helper()
	pod := []string{"spec", "template", "spec"}
	app := append(append([]string{}, pod...), "containers", "[name="+w.Container+"]")
	fields := [][]string{
		append(append([]string{}, pod...), "terminationGracePeriodSeconds"),
		append(append([]string{}, pod...), "volumes", "[name="+VolumeName+"]"),
		append(append([]string{}, pod...), "initContainers", "[name="+InitContainerName+"]"),
		append(append([]string{}, app...), "volumeMounts", "[mountPath="+e.opts.Dir+"]"),
		append(append([]string{}, app...), "lifecycle", "preStop"),
	}
	for _, a := range e.annotations {
		fields = append(fields, []string{"spec", "template", "metadata", "annotations", a.Key})
	}
	if e.hostIPEnv != nil {
		fields = append(fields, append(append([]string{}, app...), "env", "[name="+HostIPEnv+"]"))
	}
	if e.readiness != nil {
		fields = append(fields, append(append([]string{}, app...), "readinessProbe"))
	}
	if e.proxy != nil {
		proxy := append(append([]string{}, pod...), "containers", "[name="+ProxyContainerName+"]")
		if w.HasProxy {
			fields = append(fields, append(append([]string{}, proxy...), "volumeMounts", "[mountPath="+e.opts.Dir+"]"),
				append(append([]string{}, proxy...), "lifecycle", "preStop"), append(append([]string{}, proxy...), "image"))
		} else {
			fields = append(fields, proxy)
		}
	}
	before := workloadDoc(t, in, w)
	doc := workloadDoc(t, text, w)
	var out spans
	for _, f := range fields {
		// The field itself when the input has its parent; else the first part the input lacks.
		n := len(f)
		for n > 1 && findPath(before.root, f[:n-1]) == nil {
			n--
		}
		// A parent that is there but empty ({}, [] or nothing) is rewritten with its content.
		if parent := findPath(before.root, f[:n-1]); n > 1 && findPath(before.root, f[:n]) == nil && len(parent.Content) == 0 {
			n--
		}
		if sp, ok := doc.span(f[:n]); ok {
			out = append(out, sp)
		}
	}
	return out
}

type layoutDoc struct {
	root  *yaml.Node
	order []*yaml.Node
	end   int
}

// workloadDoc finds w's document in text, with its nodes in order and its last line.
func workloadDoc(t *testing.T, text []byte, w *Workload) *layoutDoc {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(text))
	all := lines(text)
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		root := doc.Content[0]
		if yamlnode.Scalar(yamlnode.Lookup(root, "kind")) != w.Kind || yamlnode.Scalar(yamlnode.Path(root, "metadata", "name")) != w.Name {
			continue
		}
		d := &layoutDoc{root: root, end: len(all)}
		for l := root.Line + 1; l <= len(all); l++ {
			if strings.HasPrefix(all[l-1], "---") || strings.HasPrefix(all[l-1], "...") {
				d.end = l - 1
				break
			}
		}
		var walk func(*yaml.Node)
		walk = func(n *yaml.Node) {
			d.order = append(d.order, n)
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(root)
		return d
	}
	t.Fatalf("no %s/%s in\n%s", w.Kind, w.Name, text)
	return nil
}

// span is the lines of the field at p: from its key or item to the line before the next node.
func (d *layoutDoc) span(p []string) ([2]int, bool) {
	parent := findPath(d.root, p[:len(p)-1])
	if parent == nil {
		return [2]int{}, false
	}
	start, value := selectChild(parent, p[len(p)-1])
	if value == nil {
		return [2]int{}, false
	}
	// The first node after value and everything under it.
	i := 0
	for d.order[i] != value {
		i++
	}
	var count func(*yaml.Node) int
	count = func(n *yaml.Node) int {
		c := 1
		for _, ch := range n.Content {
			c += count(ch)
		}
		return c
	}
	end := d.end
	if next := i + count(value); next < len(d.order) {
		end = d.order[next].Line - 1
	}
	return [2]int{start.Line, end}, true
}

// findPath follows keys and [field=value] list selectors.
func findPath(n *yaml.Node, p []string) *yaml.Node {
	for _, part := range p {
		if _, n = selectChild(n, part); n == nil {
			return nil
		}
	}
	return n
}

// selectChild returns the node where the child's entry starts (its key, or the item) and
// the child's value.
func selectChild(n *yaml.Node, part string) (start, value *yaml.Node) {
	if strings.HasPrefix(part, "[") {
		field, want, _ := strings.Cut(strings.Trim(part, "[]"), "=")
		_, item := yamlnode.ItemByKey(n, field, want)
		return item, item
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == part {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

func lines(text []byte) []string {
	return strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
}

// diffLines returns the line numbers (1-based) a minimal diff removes from a and adds in b.
func diffLines(a, b []string) (removed, added []int) {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j = i+1, j+1
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			added = append(added, j+1)
			j++
		default:
			removed = append(removed, i+1)
			i++
		}
	}
	return removed, added
}

// lineDiff prints the diff for a failing test.
func lineDiff(a, b []byte) string {
	la, lb := lines(a), lines(b)
	removed, added := diffLines(la, lb)
	var out strings.Builder
	for _, l := range removed {
		fmt.Fprintf(&out, "-%4d %s\n", l, la[l-1])
	}
	for _, l := range added {
		fmt.Fprintf(&out, "+%4d %s\n", l, lb[l-1])
	}
	return out.String()
}

// indentStyles are the ways text indents its block collections: a nested mapping's keys
// right of its key ("map+N"), a list's dashes right of its key ("seq+N"), an item's first
// key right of its dash ("item+N").
func indentStyles(t *testing.T, text []byte) map[string]bool {
	t.Helper()
	styles := map[string]bool{}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		block := n.Style&yaml.FlowStyle == 0 && len(n.Content) > 0
		switch {
		case n.Kind == yaml.MappingNode && block:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if v.Style&yaml.FlowStyle != 0 || len(v.Content) == 0 || v.Line == k.Line {
					continue
				}
				switch v.Kind {
				case yaml.MappingNode:
					styles[fmt.Sprintf("map+%d", v.Content[0].Column-k.Column)] = true
				case yaml.SequenceNode:
					styles[fmt.Sprintf("seq+%d", v.Column-k.Column)] = true
				}
			}
		case n.Kind == yaml.SequenceNode && block:
			for _, item := range n.Content {
				if item.Kind == yaml.MappingNode && item.Style&yaml.FlowStyle == 0 {
					styles[fmt.Sprintf("item+%d", item.Column-n.Column)] = true
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(text))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return styles
		}
		if err != nil {
			t.Fatal(err)
		}
		walk(&doc)
	}
}

func decodeAll(t *testing.T, text []byte) []any {
	t.Helper()
	var docs []any
	dec := yaml.NewDecoder(bytes.NewReader(text))
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%v:\n%s", err, text)
		}
		if v != nil { // an empty document holds no object
			docs = append(docs, v)
		}
	}
}

// checkStrict decodes each document as the Kubernetes object it names, refusing unknown
// fields: a field spliced at the wrong depth would be one.
func checkStrict(t *testing.T, text []byte) {
	t.Helper()
	for i, doc := range decodeAll(t, text) {
		data, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var target any
		switch kind, _ := doc.(map[string]any)["kind"].(string); kind {
		case "Deployment":
			target = &appsv1.Deployment{}
		case "StatefulSet":
			target = &appsv1.StatefulSet{}
		case "DaemonSet":
			target = &appsv1.DaemonSet{}
		case "Service":
			target = &corev1.Service{}
		case "ConfigMap":
			target = &corev1.ConfigMap{}
		default:
			t.Fatalf("document %d: kind %q", i+1, kind)
		}
		if err := sigsyaml.UnmarshalStrict(data, target); err != nil {
			t.Errorf("document %d: %v\n%s", i+1, err, data)
		}
	}
}
