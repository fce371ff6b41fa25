// Package yamlnode reads, builds and splices yaml.v3 node trees: what meshdrain plan edits a
// user's manifests with. A Deployment carries fields, comments and key order that a round trip
// through structs would lose, and a plan must change only what it names; Splice then writes
// the changed trees back as the input's own lines, with only the changed fields rewritten.
package yamlnode

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// The manifests are edited as yaml.v3 node trees rather than decoded into structs: a user's
// Deployment carries fields, comments and key order that a round trip through structs would
// lose, and a plan must change only what it names.

func Mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func Sequence(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

func Str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	switch {
	case strings.Contains(s, "\n"):
		// A multi-line value (a YAML proxy config) reads best as a literal block.
		n.Style = yaml.LiteralStyle
	case strings.Contains(s, `"`):
		// JSON in an annotation reads better single-quoted than with escaped quotes.
		n.Style = yaml.SingleQuotedStyle
	}
	// Otherwise the encoder quotes a value that YAML would read as another type ("true", "15").
	return n
}

func Int(v int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v, 10)}
}

func Bool(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// nullNode is an explicit null: in a strategic-merge patch it deletes the field.
func Null() *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"} }

// mapOf builds a mapping from key, value pairs, in that order.
func MapOf(pairs ...any) *yaml.Node {
	m := Mapping()
	for i := 0; i+1 < len(pairs); i += 2 {
		SetKey(m, pairs[i].(string), pairs[i+1].(*yaml.Node))
	}
	return m
}

// resolve follows aliases, so an anchored value is read like any other.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// lookup returns the value under key in mapping m, or nil.
func Lookup(m *yaml.Node, key string) *yaml.Node {
	m = Resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return Resolve(m.Content[i+1])
		}
	}
	return nil
}

// path follows keys through nested mappings; nil when any is missing.
func Path(m *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		m = Lookup(m, k)
	}
	return m
}

// setKey sets key in mapping m to v, in place when the key exists. The old value's comments
// do not move to v: Manifests.Write keeps each comment on its line, or names it as dropped
// when plan rewrites that line.
func SetKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

// EnsureMap returns the mapping under key, creating it (or replacing a null) when needed.
func EnsureMap(m *yaml.Node, key string) (*yaml.Node, error) {
	return ensure(m, key, yaml.MappingNode, "a mapping", Mapping)
}

// EnsureSeq returns the sequence under key, creating it (or replacing a null) when needed.
func EnsureSeq(m *yaml.Node, key string) (*yaml.Node, error) {
	return ensure(m, key, yaml.SequenceNode, "a list", func() *yaml.Node { return Sequence() })
}

// ensure returns the node of kind under key, setting a fresh one where there is none or a
// null; what names the kind in the error for any other node.
func ensure(m *yaml.Node, key string, kind yaml.Kind, what string, fresh func() *yaml.Node) (*yaml.Node, error) {
	if v := Lookup(m, key); v != nil {
		switch {
		case v.Kind == kind:
			return v, nil
		case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
		default:
			return nil, fmt.Errorf("%s is not %s", key, what)
		}
	}
	v := fresh()
	SetKey(m, key, v)
	return v, nil
}

// itemByKey finds the element of a sequence of mappings whose key field equals value
// (strategic merge's merge key: containers and volumes by name, mounts by mountPath).
func ItemByKey(seq *yaml.Node, key, value string) (int, *yaml.Node) {
	seq = Resolve(seq)
	if seq == nil || seq.Kind != yaml.SequenceNode {
		return -1, nil
	}
	for i, item := range seq.Content {
		if v := Lookup(item, key); v != nil && v.Value == value {
			return i, Resolve(item)
		}
	}
	return -1, nil
}

// upsert replaces the element with the same merge key, or appends item.
func Upsert(seq *yaml.Node, key string, item *yaml.Node) (added bool) {
	i, _ := ItemByKey(seq, key, Lookup(item, key).Value)
	if i < 0 {
		seq.Content = append(seq.Content, item)
		return true
	}
	seq.Content[i] = item
	return false
}

// copyTree copies a node tree deeply, aliases pointing into the copy.
func Copy(n *yaml.Node) *yaml.Node {
	copies := map[*yaml.Node]*yaml.Node{}
	var cp func(*yaml.Node) *yaml.Node
	cp = func(n *yaml.Node) *yaml.Node {
		c := *n
		copies[n] = &c
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, child := range n.Content {
			c.Content[i] = cp(child)
		}
		return &c
	}
	root := cp(n)
	for orig, c := range copies {
		if target, ok := copies[orig.Alias]; ok {
			c.Alias = target
		}
	}
	return root
}

// equalNode compares what two trees say, not how: styles, comments, positions and the order
// of a mapping's keys do not count.
func Equal(a, b *yaml.Node) bool {
	if a.Kind != b.Kind || len(a.Content) != len(b.Content) {
		return false
	}
	switch a.Kind {
	case yaml.ScalarNode:
		return a.ShortTag() == b.ShortTag() && a.Value == b.Value
	case yaml.AliasNode:
		return a.Value == b.Value
	case yaml.MappingNode:
		for i := 0; i+1 < len(a.Content); i += 2 {
			j := -1
			for k := 0; k+1 < len(b.Content); k += 2 {
				if b.Content[k].Value == a.Content[i].Value {
					j = k
					break
				}
			}
			if j < 0 || !Equal(a.Content[i+1], b.Content[j+1]) {
				return false
			}
		}
		return true
	}
	for i := range a.Content {
		if !Equal(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}

// items are a sequence's elements; none when n is not a sequence.
func Items(n *yaml.Node) []*yaml.Node {
	if n = Resolve(n); n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func Scalar(n *yaml.Node) string {
	if n = Resolve(n); n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// stringsOf reads a sequence of scalars.
func Strings(n *yaml.Node) []string {
	n = Resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	var out []string
	for _, item := range n.Content {
		out = append(out, Scalar(item))
	}
	return out
}

// jsonOf writes a node as compact JSON with ", " and ": " separators, keys in their order:
// how people write a proxy.istio.io/config annotation by hand.
func JSON(n *yaml.Node) (string, error) {
	n = Resolve(n)
	var b strings.Builder
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteString(", ")
			}
			k, _ := json.Marshal(n.Content[i].Value)
			v, err := JSON(n.Content[i+1])
			if err != nil {
				return "", err
			}
			b.Write(k)
			b.WriteString(": ")
			b.WriteString(v)
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				b.WriteString(", ")
			}
			v, err := JSON(item)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return "", err
		}
		data, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		b.Write(data)
	default:
		return "", fmt.Errorf("cannot write YAML node kind %d as JSON", n.Kind)
	}
	return b.String(), nil
}
