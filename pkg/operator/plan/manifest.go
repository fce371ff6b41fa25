package plan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

// WorkloadKinds are the kinds whose pod template plan can change.
var WorkloadKinds = []string{"Deployment", "StatefulSet", "DaemonSet"}

// Manifests is the user's YAML stream (one or more documents): its bytes, each document's
// node tree as read, and a copy that the plan changes. What Write prints differs from the
// bytes only on the lines of the fields the plan sets.
type Manifests struct {
	data []byte
	orig []*yaml.Node // as read: the positions of what Write splices
	docs []*yaml.Node // what the plan changes
	// notes are what the last Write said about the comments it dropped.
	notes []string
	// json: the stream was JSON, which has no lines of its own to keep: Write prints it as
	// YAML, whole.
	json bool
}

// ReadManifests parses a YAML (or JSON) stream of Kubernetes objects.
func ReadManifests(r io.Reader) (*Manifests, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	m := &Manifests{data: data}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	m.json = len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read manifests: document %d: %w", len(m.docs)+1, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
			continue // an empty document, as between two `---`
		}
		if root := yamlnode.Resolve(doc.Content[0]); root.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("read manifests: document %d is not a Kubernetes object (a YAML mapping)", len(m.docs)+1)
		}
		m.orig = append(m.orig, &doc)
		m.docs = append(m.docs, yamlnode.Copy(&doc))
	}
	if len(m.docs) == 0 {
		return nil, errors.New("read manifests: no document")
	}
	return m, nil
}

// Write prints the manifests as read, with the plan's changes spliced in: a document the
// plan does not change, and every line of a changed one outside the planned fields, is
// written byte for byte. A planned field that exists is rewritten on its own lines; a new
// one is added after its siblings, indented as they are. A comment on a rewritten line is
// dropped (it was about the old value) and named in Notes.
func (m *Manifests) Write(w io.Writer) error {
	m.notes = nil
	if m.json {
		return m.writeYAML(w)
	}
	var before, after []*yaml.Node
	for i, orig := range m.orig {
		before, after = append(before, orig.Content[0]), append(after, m.docs[i].Content[0])
	}
	out, notes, err := yamlnode.Splice(m.data, before, after)
	if err != nil {
		return err
	}
	m.notes = notes
	_, err = w.Write(out)
	return err
}

// writeYAML prints the manifests as YAML in block style, a document each: what -o yaml asks
// for, from a JSON input whose own layout is no YAML to splice into.
func (m *Manifests) writeYAML(w io.Writer) error {
	var buf bytes.Buffer
	for i, doc := range m.docs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		n := yamlnode.Copy(doc)
		clearStyles(n)
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(n); err != nil {
			return fmt.Errorf("write document %d as YAML: %w", i+1, err)
		}
		if err := enc.Close(); err != nil {
			return err
		}
	}
	m.notes = append(m.notes, "the input was JSON: the changed manifests are written as YAML (-o json is not a manifest format of plan's)")
	_, err := w.Write(buf.Bytes())
	return err
}

// clearStyles clears the styles JSON gave n (flow collections, quoted strings), so that the
// encoder writes block YAML and quotes only what needs it.
func clearStyles(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		clearStyles(c)
	}
}

// Notes are what the last Write dropped: comments on the lines it rewrote, one sentence each,
// for the operator (stderr), since the output itself must hold only the manifests.
func (m *Manifests) Notes() []string { return append([]string(nil), m.notes...) }

// objects are the Kubernetes objects of the stream, a List's items in place of the List
// (kubectl get -o yaml prints one, and kubectl apply takes it).
func (m *Manifests) objects() []*yaml.Node {
	var objs []*yaml.Node
	for _, doc := range m.docs {
		obj := yamlnode.Resolve(doc.Content[0])
		if kind := yamlnode.Scalar(yamlnode.Lookup(obj, "kind")); strings.HasSuffix(kind, "List") && yamlnode.Lookup(obj, "items") != nil {
			for _, item := range yamlnode.Items(yamlnode.Lookup(obj, "items")) {
				if item = yamlnode.Resolve(item); item.Kind == yaml.MappingNode {
					objs = append(objs, item)
				}
			}
			continue
		}
		objs = append(objs, obj)
	}
	return objs
}

func isWorkloadKind(kind string) bool { return slices.Contains(WorkloadKinds, kind) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "nothing"
	}
	sort.Strings(list)
	return strings.Join(list, ", ")
}
