package yamlnode

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// source is the manifests as read, addressed by line (1-based) and column (1-based, in runes).
type source struct {
	data  []byte
	start []int // start[i] is the offset of line i+1
	lines int
	eol   string
}

func newSource(data []byte) *source {
	s := &source{data: data, start: []int{0}, eol: "\n"}
	for i, c := range data {
		if c == '\n' {
			s.start = append(s.start, i+1)
		}
	}
	s.lines = len(s.start)
	if len(data) == 0 || data[len(data)-1] == '\n' {
		s.lines-- // no line after the final newline
	}
	if bytes.Contains(data, []byte("\r\n")) {
		s.eol = "\r\n"
	}
	return s
}

// lineEnd is the offset where line l's text ends (before its newline).
func (s *source) lineEnd(l int) int {
	end := len(s.data)
	if l < len(s.start) {
		end = s.start[l] - 1
	}
	if end > s.start[l-1] && s.data[end-1] == '\r' {
		end--
	}
	return end
}

func (s *source) text(l int) string { return string(s.data[s.start[l-1]:s.lineEnd(l)]) }

// offset is the byte offset of column col of line l.
func (s *source) offset(l, col int) int {
	off := s.start[l-1]
	for i := 1; i < col && off < len(s.data); i++ {
		_, size := utf8.DecodeRune(s.data[off:])
		off += size
	}
	return off
}

// isDocumentMarker: a `---` or `...` at the start of a line ends the document before it,
// even inside a block scalar; so does a directive (%YAML, %TAG), which only precedes a `---`.
func (s *source) isDocumentMarker(l int) bool {
	t := s.text(l)
	return (strings.HasPrefix(t, "---") || strings.HasPrefix(t, "...")) && (len(t) == 3 || t[3] == ' ' || t[3] == '\t') ||
		strings.HasPrefix(t, "%")
}

// splice replaces data[start:end] with text; start == end inserts.
type splice struct {
	start, end int
	text       string
}

// apply makes the edits, which must not overlap; several at one offset keep their order,
// insertions before the edit that replaces or removes what starts there.
func (s *source) apply(edits []splice) ([]byte, error) {
	sort.SliceStable(edits, func(i, j int) bool {
		if edits[i].start != edits[j].start {
			return edits[i].start < edits[j].start
		}
		return edits[i].start == edits[i].end && edits[j].start != edits[j].end
	})
	var out bytes.Buffer
	at := 0
	for _, e := range edits {
		if e.start < at {
			return nil, fmt.Errorf("write manifests: overlapping edits at offset %d", e.start)
		}
		out.Write(s.data[at:e.start])
		out.WriteString(e.text)
		at = e.end
	}
	out.Write(s.data[at:])
	return out.Bytes(), nil
}

// docLayout locates the nodes of one document in the source.
type docLayout struct {
	src   *source
	order []*yaml.Node       // the document's nodes in the order they appear
	after map[*yaml.Node]int // index in order of the first node after n and its children
	// indent is the indentation of the entry that holds n: its key's, or its sequence's dash.
	indent map[*yaml.Node]int
	// scalarLines are the lines inside block scalars: a # there is text, not a comment.
	scalarLines map[int]bool
	last        int // the document's last line
}

func (s *source) layout(root *yaml.Node) *docLayout {
	d := &docLayout{src: s, after: map[*yaml.Node]int{}, indent: map[*yaml.Node]int{}, scalarLines: map[int]bool{}, last: s.lines}
	d.walk(root, root.Column-1)
	for l := root.Line + 1; l <= s.lines; l++ {
		if s.isDocumentMarker(l) {
			d.last = l - 1
			break
		}
	}
	for _, n := range d.order {
		if isBlockScalar(n) {
			for l := n.Line + 1; l <= d.blockScalarEnd(n, d.nextLine(n)-1); l++ {
				d.scalarLines[l] = true
			}
		}
	}
	return d
}

func (d *docLayout) walk(n *yaml.Node, indent int) {
	d.order = append(d.order, n)
	d.indent[n] = indent
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			d.walk(n.Content[i], n.Content[i].Column-1)
			d.walk(n.Content[i+1], n.Content[i].Column-1)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			d.walk(item, dashColumn(n)-1)
		}
	}
	d.after[n] = len(d.order)
}

// nextLine is the line of the first node after n and its children.
func (d *docLayout) nextLine(n *yaml.Node) int {
	if i := d.after[n]; i < len(d.order) {
		return d.order[i].Line
	}
	return d.last + 1
}

// lastLine is n's last line: the last line with content before the node that follows it.
// Blank lines and comment lines in between belong to what follows (head comments).
func (d *docLayout) lastLine(n *yaml.Node) int {
	limit := d.nextLine(n) - 1
	leaf := n
	for isBlockCollection(leaf) {
		leaf = leaf.Content[len(leaf.Content)-1]
	}
	if isBlockScalar(leaf) {
		return d.blockScalarEnd(leaf, limit)
	}
	end := limit
	for end > n.Line && isBlankOrComment(d.src.text(end)) {
		end--
	}
	return max(end, n.Line)
}

// blockScalarEnd is the last line of a literal or folded scalar's text: the lines indented
// past the entry that holds it.
func (d *docLayout) blockScalarEnd(n *yaml.Node, limit int) int {
	end, textIndent := n.Line, -1
	for l := n.Line + 1; l <= limit; l++ {
		t := d.src.text(l)
		if strings.TrimSpace(t) == "" {
			continue
		}
		indent := len(t) - len(strings.TrimLeft(t, " "))
		if indent <= d.indent[n] || (textIndent >= 0 && indent < textIndent) {
			break
		}
		if textIndent < 0 {
			textIndent = indent
		}
		end = l
	}
	return end
}

func isBlankOrComment(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || strings.HasPrefix(t, "#")
}

func isBlockScalar(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0
}

// isBlockCollection: a mapping or sequence written one entry a line (not {…} or […]).
func isBlockCollection(n *yaml.Node) bool {
	return (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && n.Style&yaml.FlowStyle == 0 && len(n.Content) > 0
}

// dashColumn is the column of a block sequence's dashes (the node's own position is its
// anchor's or tag's when it has one).
func dashColumn(seq *yaml.Node) int {
	if (seq.Anchor == "" && seq.Style&yaml.TaggedStyle == 0) || len(seq.Content) == 0 {
		return seq.Column
	}
	return seq.Content[0].Column - 2
}

// keyColumn is the column of a block mapping's keys.
func keyColumn(m *yaml.Node) int {
	if len(m.Content) == 0 {
		return m.Column
	}
	return m.Content[0].Column
}
