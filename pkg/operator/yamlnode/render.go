package yamlnode

import (
	"bytes"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// blockStyle is how a document indents, so that what plan adds looks like what is there.
type blockStyle struct {
	mapIndent  int // a nested mapping's keys, right of its parent's key
	seqIndent  int // a sequence's dashes, right of its parent's key (0: `- ` under the key)
	itemIndent int // an item's content, right of its dash
}

// detectStyle takes each measure from the first place in the document that shows it; a
// document that shows none gets kubectl's style (2, lists under their key).
func detectStyle(root *yaml.Node) blockStyle {
	st := blockStyle{mapIndent: 2, seqIndent: 0, itemIndent: 2}
	var seenMap, seenSeq, seenItem bool
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch {
		case n.Kind == yaml.MappingNode && isBlockCollection(n):
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if !isBlockCollection(v) || v.Line == k.Line {
					continue
				}
				if v.Kind == yaml.MappingNode && !seenMap && keyColumn(v) > k.Column {
					st.mapIndent, seenMap = keyColumn(v)-k.Column, true
				}
				if v.Kind == yaml.SequenceNode && !seenSeq && dashColumn(v) >= k.Column {
					st.seqIndent, seenSeq = dashColumn(v)-k.Column, true
				}
			}
		case n.Kind == yaml.SequenceNode && isBlockCollection(n) && !seenItem:
			if first := n.Content[0]; first.Line == n.Line && first.Kind == yaml.MappingNode && isBlockCollection(first) && first.Column-dashColumn(n) >= 2 {
				st.itemIndent, seenItem = first.Column-dashColumn(n), true
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	return st
}

// renderer writes nodes in a document's blockStyle, one string a line, and keeps the first
// error of the encoder (which fails only on a node no YAML could have produced).
type renderer struct {
	blockStyle
	err error
}

// entry renders `key: value` with the key at column indent+1.
func (r *renderer) entry(k, v *yaml.Node, indent int) []string {
	if isBlockCollection(v) {
		head := spaces(indent) + r.keyText(k) + ":"
		if v.Kind == yaml.MappingNode {
			return append([]string{head}, r.mapping(v, indent+r.mapIndent)...)
		}
		return append([]string{head}, r.sequence(v, indent+r.seqIndent)...)
	}
	return indentLines(r.encode(&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{k, v}}), indent)
}

func (r *renderer) mapping(m *yaml.Node, indent int) []string {
	var out []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		out = append(out, r.entry(m.Content[i], m.Content[i+1], indent)...)
	}
	return out
}

// sequence renders the items with their dashes at column indent+1.
func (r *renderer) sequence(seq *yaml.Node, indent int) []string {
	var out []string
	for _, item := range seq.Content {
		lines := r.content(item, indent+r.itemIndent)
		lines[0] = spaces(indent) + "-" + spaces(r.itemIndent-1) + strings.TrimLeft(lines[0], " ")
		out = append(out, lines...)
	}
	return out
}

// content renders a value that starts at column indent+1: a sequence item, or a document.
func (r *renderer) content(n *yaml.Node, indent int) []string {
	switch {
	case isBlockCollection(n) && n.Kind == yaml.MappingNode:
		return r.mapping(n, indent)
	case isBlockCollection(n):
		return r.sequence(n, indent)
	}
	// The encoder writes a lone value as a sequence's item, "- value", and any further line
	// (a literal's text) indented past the dash.
	lines := r.encode(Sequence(n))
	lines[0] = strings.TrimPrefix(lines[0], "- ")
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" {
			lines[i] = spaces(indent) + strings.TrimPrefix(lines[i], "  ")
		}
	}
	lines[0] = spaces(indent) + lines[0]
	return lines
}

// keyText is a key as YAML writes it (quoted when it must be).
func (r *renderer) keyText(k *yaml.Node) string {
	return strings.TrimPrefix(r.encode(Sequence(k))[0], "- ")
}

// encode writes n with yaml.v3, which quotes each value as its type needs.
func (r *renderer) encode(n *yaml.Node) []string {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(min(max(r.mapIndent, 2), 9))
	err := enc.Encode(n)
	if err == nil {
		err = enc.Close()
	}
	if err != nil {
		if r.err == nil {
			r.err = fmt.Errorf("write manifests: %w", err)
		}
		return []string{""}
	}
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}

func spaces(n int) string { return strings.Repeat(" ", max(n, 0)) }

func indentLines(lines []string, indent int) []string {
	for i, l := range lines {
		if l != "" {
			lines[i] = spaces(indent) + l
		}
	}
	return lines
}

// EncoderIndent is how yaml.v3's encoder should indent n's content to look like n does:
// its mappings' indent, and whether its lists sit under their key (compact).
func EncoderIndent(n *yaml.Node) (indent int, compactSeq bool) {
	st := detectStyle(n)
	return min(max(st.mapIndent, 2), 9), st.seqIndent < st.mapIndent
}
