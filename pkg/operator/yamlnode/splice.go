package yamlnode

import (
	"fmt"
	"strings"

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
