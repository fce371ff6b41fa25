package podsim

import (
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// The canvas a picture is drawn on: SVG elements written as text, and labels placed clear
// of the marks they would hide or be hidden by.

// svgCanvas accumulates the elements of one picture.
type svgCanvas struct {
	b strings.Builder
	// marks are the failure marks, which no label may run through: a label there would hide
	// the moment the mark shows, and the mark the label's words.
	marks []box
}

// box is a rectangle of the picture, in SVG pixels.
type box struct{ x0, y0, x1, y1 float64 }

func (b box) overlaps(o box) bool { return b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1 }

// textBox is the room a 12px label with its baseline at y takes between x0 and x1.
func textBox(x0, x1, y float64) box { return box{x0, y - 12, x1, y + 3} }

// labelGap is the room kept between a label and what it labels or avoids.
const labelGap = 4

func (c *svgCanvas) raw(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

func (c *svgCanvas) rect(x, y, w, h float64, fill, extra string) {
	c.raw("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s/>\n", x, y, max(w, 0), h, fill, extra)
}

func (c *svgCanvas) line(x1, y1, x2, y2 float64, stroke, extra string) {
	c.raw("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"%s/>\n", x1, y1, x2, y2, stroke, extra)
}

// text writes an escaped label; anchor is start, middle or end.
func (c *svgCanvas) text(x, y float64, anchor, extra, s string) {
	c.raw("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra)
	_ = xml.EscapeText(&c.b, []byte(s))
	c.b.WriteString("</text>\n")
}

// label writes s after x, where a bar that starts at barFrom ends; past the failure marks
// that would run through it there; and where it would then leave the picture, before x (in
// white inside the bar if it fits there), again clear of the marks.
func (c *svgCanvas) label(x, y float64, s string, barFrom float64) {
	c.placeLabel(x, y, s, barFrom, halo)
}

// note writes s at the start of a lane, clear of the failure marks, in grey.
func (c *svgCanvas) note(y float64, s string) {
	c.placeLabel(svgLeft, y, s, svgLeft, halo+` fill="#888888"`)
}

func (c *svgCanvas) placeLabel(x, y float64, s string, barFrom float64, style string) {
	width := float64(len(s)) * charWidth
	// clear moves a label of this width whose left edge is at left past every mark it would
	// cross, in the direction dir (+1 right, -1 left); it returns the label's left edge.
	clear := func(left float64, dir float64) float64 {
		for moved := true; moved; {
			moved = false
			for _, m := range c.marks {
				if !m.overlaps(textBox(left-labelGap/2, left+width+labelGap/2, y)) {
					continue
				}
				if dir > 0 {
					left = m.x1 + labelGap
				} else {
					left = m.x0 - labelGap - width
				}
				moved = true
			}
		}
		return left
	}
	if left := clear(x+labelGap, 1); left+width <= svgWidth-4 {
		c.text(left, y, "start", style, s)
		return
	}
	if left := clear(x-labelGap-width, -1); left >= svgLeft+2 {
		if left >= barFrom+labelGap && left+width <= x {
			style = ` fill="#ffffff"`
		}
		c.text(left+width, y, "end", style, s)
		return
	}
	// No room beside x: the clear place nearest to it, next to a mark or at an edge of the
	// plot, over the bar's end if it must.
	best, found := 0.0, false
	candidates := []float64{svgLeft + 2, svgWidth - 4 - width}
	for _, m := range c.marks {
		candidates = append(candidates, m.x1+labelGap, m.x0-labelGap-width)
	}
	for _, left := range candidates {
		if left >= svgLeft+2 && left+width <= svgWidth-4 && clear(left, 1) == left && (!found || math.Abs(left-x) < math.Abs(best-x)) {
			best, found = left, true
		}
	}
	if !found { // a mark crosses it wherever it goes: at the right edge
		best = svgWidth - 4 - width
	}
	c.text(best, y, "start", style, s)
}

// halo keeps a label readable where a marker line crosses it.
const halo = ` stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"`

// diamondRadius is the half-width of a failed preStop's mark.
const diamondRadius = 6

// diamond draws a failed preStop's mark centred on x, y.
func (c *svgCanvas) diamond(x, y float64, fill, extra string) {
	const r = diamondRadius
	c.raw("<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"1.5\"%s/>\n",
		x, y-r, x+r, y, x, y+r, x-r, y, fill, extra)
}
