package yamlnode

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// The changed manifests are the input's bytes with the planned fields spliced in, so that a
// GitOps pull request shows only what the plan changes. Re-encoding the node trees cannot do
// that: the encoder re-indents lists, drops a `---` after a header comment and moves comments.
// Instead Write compares each document's tree as read with the tree the plan changed and
// rewrites only the lines of the fields that differ, at the positions yaml.v3 recorded (a
// node has its line and column, not its end: a field ends on the last line with content
// before the node that follows it). New fields are written in the indentation the document
// already uses. A comment on a rewritten line is kept: at the end of the value's new first
// line when it was on the old one, else moved to a line of its own above the value; either way
// Notes names it, since it was written about the old value.

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

// splicer collects the edits that turn one document as read into the document as planned.
type splicer struct {
	d     *docLayout
	r     *renderer
	id    string // the object's Kind/Name, for notes
	edits []splice
	notes []string
}

// slot is where a value sits: under key in a mapping; key is nil for a sequence's item or
// the document's root, which are rewritten from their own first line and column.
type slot struct {
	key *yaml.Node
}

// diff records the edits that make old (as read) into new (as planned). Mappings whose keys
// are kept in order and sequences that only grow are edited inside; anything else is written
// anew at its slot.
func (sp *splicer) diff(path string, old, new *yaml.Node, at slot) {
	if Equal(old, new) {
		return
	}
	if old.Kind == new.Kind && isBlockCollection(old) && old.Anchor == "" {
		switch old.Kind {
		case yaml.MappingNode:
			if keysKept(old, new) {
				for i := 0; i+1 < len(old.Content); i += 2 {
					sp.diff(childPath(path, old.Content[i].Value), old.Content[i+1], new.Content[i+1], slot{key: old.Content[i]})
				}
				if len(new.Content) > len(old.Content) {
					added := renderable(&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: new.Content[len(old.Content):]}, nil)
					sp.insert(old, sp.r.mapping(added, keyColumn(old)-1))
				}
				return
			}
		case yaml.SequenceNode:
			if sp.scalarItems(old) && sp.scalarItems(new) {
				sp.diffItems(path, old, new)
				return
			}
			if len(new.Content) >= len(old.Content) {
				for i := range old.Content {
					sp.diff(itemPath(path, old.Content[i], i), old.Content[i], new.Content[i], slot{})
				}
				if len(new.Content) > len(old.Content) {
					added := renderable(Sequence(new.Content[len(old.Content):]...), nil)
					// The new items are spaced after their dash as this list's first one is.
					docItemIndent := sp.r.itemIndent
					if first := old.Content[0]; first.Line == old.Line && first.Column-dashColumn(old) >= 2 {
						sp.r.itemIndent = first.Column - dashColumn(old)
					}
					sp.insert(old, sp.r.sequence(added, dashColumn(old)-1))
					sp.r.itemIndent = docItemIndent
				}
				return
			}
		}
	}
	sp.replace(path, old, new, at)
}

// insert adds lines after collection n's last line.
func (sp *splicer) insert(n *yaml.Node, lines []string) {
	at := sp.d.src.lineEnd(sp.d.lastLine(n))
	sp.edits = append(sp.edits, splice{at, at, sp.d.src.eol + strings.Join(lines, sp.d.src.eol)})
}

// replace rewrites a value whole, from its key (or its own start) to its last line.
func (sp *splicer) replace(path string, old, new *yaml.Node, at slot) {
	from := old
	if at.key != nil {
		from = at.key
	}
	indent := from.Column - 1
	quoted := old // a field's string keeps its quotes; an item's position says nothing of them
	if at.key == nil {
		quoted = nil
	}
	v := renderable(new, quoted)
	if (old.Kind == yaml.MappingNode || old.Kind == yaml.SequenceNode) && len(old.Content) == 0 {
		// {} and [] must be written in flow style: that says nothing of how to write content.
		v.Style &^= yaml.FlowStyle
	}
	var lines []string
	if at.key != nil {
		lines = sp.r.entry(renderable(at.key, nil), v, indent)
	} else {
		lines = sp.r.content(v, indent)
	}
	lines[0] = strings.TrimLeft(lines[0], " ")
	last := sp.d.lastLine(old)
	comments := sp.comments(from.Line, from.Column, last)
	// The first line's comment stays at the end of the new first line, with its spacing,
	// unless that line opens a block scalar, whose header takes no comment here.
	if len(comments) > 0 && comments[0].line == from.Line && !isBlockScalar(v) {
		lines[0] += comments[0].gap + comments[0].text
		sp.notes = append(sp.notes, fmt.Sprintf("%s: kept the comment %q (line %d) on %s, which the plan changes: check that it still holds",
			sp.id, comments[0].text, comments[0].line, describePath(path)))
		comments = comments[1:]
	}
	sp.moveAbove(path, from.Line, comments)
	sp.edits = append(sp.edits, splice{sp.d.src.offset(from.Line, from.Column), sp.d.src.lineEnd(last), strings.Join(lines, sp.d.src.eol)})
}

// lineNote is a comment found on a line: its text (from the #), the blanks before it, its line.
type lineNote struct {
	text, gap string
	line      int
}

// comments are the comments on the lines from fromLine (from column fromColumn) to toLine,
// outside block scalars, whose # lines are text.
func (sp *splicer) comments(fromLine, fromColumn, toLine int) []lineNote {
	var out []lineNote
	for l := fromLine; l <= toLine; l++ {
		if sp.d.scalarLines[l] {
			continue
		}
		t := sp.d.src.text(l)
		if l == fromLine {
			t = spaces(fromColumn-1) + string(sp.d.src.data[sp.d.src.offset(l, fromColumn):sp.d.src.lineEnd(l)])
		}
		if i := commentIndex(t); i >= 0 {
			gap := t[len(strings.TrimRight(t[:i], " \t")):i]
			out = append(out, lineNote{text: strings.TrimSpace(t[i:]), gap: gap, line: l})
		}
	}
	return out
}

// moveAbove writes comments on lines of their own just above line at, indented as that
// line is, and names each: they were on lines the plan rewrites or removes.
func (sp *splicer) moveAbove(path string, at int, comments []lineNote) {
	if len(comments) == 0 {
		return
	}
	t := sp.d.src.text(at)
	indent := spaces(len(t) - len(strings.TrimLeft(t, " ")))
	var text strings.Builder
	for _, c := range comments {
		text.WriteString(indent + c.text + sp.d.src.eol)
		sp.notes = append(sp.notes, fmt.Sprintf("%s: moved the comment %q (line %d) on %s, which the plan changes, to a line of its own above it: check that it still holds",
			sp.id, c.text, c.line, describePath(path)))
	}
	start := sp.d.src.start[at-1]
	sp.edits = append(sp.edits, splice{start, start, text.String()})
}

// describePath names a field for a note; "" is the document itself.
func describePath(path string) string {
	if path == "" {
		return "the document, which the plan rewrites whole"
	}
	return path
}

// scalarItems: seq is a block sequence of one-line scalars, each on a line of its own after
// its dash, as a container's command or args are written: diffItems can edit it line by line.
func (sp *splicer) scalarItems(seq *yaml.Node) bool {
	if seq.Kind != yaml.SequenceNode || !isBlockCollection(seq) && len(seq.Content) > 0 || seq.Anchor != "" {
		return false
	}
	for _, item := range seq.Content {
		if item.Kind != yaml.ScalarNode || isBlockScalar(item) || strings.Contains(item.Value, "\n") || item.Anchor != "" {
			return false
		}
		if item.Line == 0 {
			continue // a new item, not read from the source
		}
		head := sp.d.src.text(item.Line)
		if prefix := strings.TrimSpace(string([]rune(head)[:min(item.Column-1, len([]rune(head)))])); prefix != "-" {
			return false
		}
	}
	return true
}

// diffItems edits a block sequence of scalars after the longest common subsequence of the
// two lists, as diff does, items matched by what they are (itemKey: a flag by its name): an
// item both have keeps its line and its comment, one whose value changes is rewritten on its
// line, items removed go with their lines, and new ones are written after the item before
// them. A re-planned preStop command then changes only on the flags that change, and the
// user's flags keep their lines.
func (sp *splicer) diffItems(path string, old, new *yaml.Node) {
	a, b := old.Content, new.Content
	if len(a) == 0 {
		sp.replace(path, old, new, slot{})
		return
	}
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if itemKey(a[i]) == itemKey(b[j]) {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var anchor *yaml.Node // the last item before the new ones that stays
	var pending []*yaml.Node
	flush := func() {
		if len(pending) == 0 {
			return
		}
		lines := sp.r.sequence(renderable(Sequence(pending...), nil), dashColumn(old)-1)
		if anchor != nil {
			end := sp.d.src.lineEnd(sp.d.lastLine(anchor))
			sp.edits = append(sp.edits, splice{end, end, sp.d.src.eol + strings.Join(lines, sp.d.src.eol)})
		} else {
			// At the end of the line before the first item, where removeItem's edits start.
			at := sp.d.src.lineEnd(a[0].Line - 1)
			sp.edits = append(sp.edits, splice{at, at, sp.d.src.eol + strings.Join(lines, sp.d.src.eol)})
		}
		pending = nil
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && itemKey(a[i]) == itemKey(b[j]):
			flush()
			if !Equal(a[i], b[j]) {
				sp.replace(itemPath(path, a[i], i), a[i], b[j], slot{})
			}
			anchor = a[i]
			i, j = i+1, j+1
		case j == len(b) || (i < len(a) && lcs[i+1][j] >= lcs[i][j+1]):
			sp.removeItem(itemPath(path, a[i], i), a[i])
			i++
		default:
			pending = append(pending, b[j])
			j++
		}
	}
	flush()
}

// itemKey is what a list item is, for diffItems: a flag written --name=value is its name (its
// value may change), anything else its value.
func itemKey(n *yaml.Node) string {
	if strings.HasPrefix(n.Value, "-") {
		if name, _, ok := strings.Cut(n.Value, "="); ok {
			return name + "="
		}
	}
	return n.Value
}

// removeItem deletes a sequence item's lines; a comment on them stays, on a line of its own
// where the item was. The edit runs from the end of the line before the item to the end of the
// item's last line, not over its final newline: something inserted after the collection that
// ends with this item goes at that line's end, which stays outside the edit.
func (sp *splicer) removeItem(path string, item *yaml.Node) {
	last := sp.d.lastLine(item)
	start, end := sp.d.src.lineEnd(item.Line-1), sp.d.src.lineEnd(last)
	// The item's lines go; their comments stay where the item was, on lines of their own.
	t := sp.d.src.text(item.Line)
	indent := spaces(len(t) - len(strings.TrimLeft(t, " ")))
	var text strings.Builder
	for _, c := range sp.comments(item.Line, 1, last) {
		text.WriteString(sp.d.src.eol + indent + c.text)
		sp.notes = append(sp.notes, fmt.Sprintf("%s: moved the comment %q (line %d) on %s, which the plan changes, to a line of its own above it: check that it still holds",
			sp.id, c.text, c.line, describePath(path)))
	}
	sp.edits = append(sp.edits, splice{start, end, text.String()})
}

// LineComment is the comment a line ends with, "" when none: a # at the start or after a
// blank, outside quotes.
func LineComment(line string) string {
	if i := commentIndex(line); i >= 0 {
		return strings.TrimSpace(line[i:])
	}
	return ""
}

// commentIndex is where a line's comment starts, -1 when it has none.
func commentIndex(line string) int {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return i
		case (c == '"' || c == '\'') && (i == 0 || strings.IndexByte(" \t[{,:-", line[i-1]) >= 0):
			quote = c
		}
	}
	return -1
}

// renderable is a copy of n to write: without comments (each stayed on its own line or was
// dropped with the value it described), and, for a field's string that replaces a quoted
// one (old), in the same quotes.
func renderable(n, old *yaml.Node) *yaml.Node {
	c := Copy(n)
	var strip func(*yaml.Node)
	strip = func(n *yaml.Node) {
		n.HeadComment, n.LineComment, n.FootComment = "", "", ""
		for _, ch := range n.Content {
			strip(ch)
		}
	}
	strip(c)
	if old != nil && old.Kind == yaml.ScalarNode && c.Kind == yaml.ScalarNode && c.ShortTag() == "!!str" && c.Style == 0 &&
		old.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 && !strings.Contains(c.Value, "\n") {
		c.Style = old.Style & (yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle)
	}
	return c
}

// keysKept: new has old's keys in old's order, and perhaps more after them.
func keysKept(old, new *yaml.Node) bool {
	if len(new.Content) < len(old.Content) {
		return false
	}
	for i := 0; i < len(old.Content); i += 2 {
		if old.Content[i].Value != new.Content[i].Value {
			return false
		}
	}
	return true
}

func childPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// itemPath names a list item by its name, as kubectl does, or by its index.
func itemPath(path string, item *yaml.Node, i int) string {
	if name := Scalar(Lookup(item, "name")); name != "" {
		return fmt.Sprintf("%s[%s]", path, name)
	}
	return fmt.Sprintf("%s[%d]", path, i)
}

// Splice returns data, the manifests as read, with each document's changes spliced in:
// before[i] is a document's tree as read (the positions), after[i] the tree changed. notes
// say which comments on rewritten lines were kept or moved, for the operator.
func Splice(data []byte, before, after []*yaml.Node) (out []byte, notes []string, err error) {
	src := newSource(data)
	var edits []splice
	for i := range before {
		sp := &splicer{d: src.layout(before[i]), r: &renderer{blockStyle: detectStyle(before[i])}}
		sp.id = Scalar(Lookup(before[i], "kind")) + "/" + Scalar(Path(before[i], "metadata", "name"))
		sp.diff("", before[i], after[i], slot{})
		if sp.r.err != nil {
			return nil, nil, sp.r.err
		}
		edits = append(edits, sp.edits...)
		notes = append(notes, sp.notes...)
	}
	out, err = src.apply(edits)
	return out, notes, err
}

// EncoderIndent is how yaml.v3's encoder should indent n's content to look like n does:
// its mappings' indent, and whether its lists sit under their key (compact).
func EncoderIndent(n *yaml.Node) (indent int, compactSeq bool) {
	st := detectStyle(n)
	return min(max(st.mapIndent, 2), 9), st.seqIndent < st.mapIndent
}
