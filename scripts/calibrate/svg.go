package main

import (
	"fmt"
	"math"
	"strings"
)

// drawSVG is the reliability diagram: for each shape, family and risk, the share of drains
// that lost a request (y) against the mean risk stated at the stop (x), both on log scales
// from 10⁻⁵ to 1, with the diagonal and the factor-2 band around it. A cell without a loss
// is drawn hollow at the share's 95% upper bound (3/n), with a line down to the bottom.
func drawSVG(cells []cell) string {
	const (
		width, height       = 760.0, 560.0
		left, top, plot     = 70.0, 40.0, 440.0
		decadesLow, decades = -5.0, 5.0
	)
	x := func(v float64) float64 { return left + (math.Log10(v)-decadesLow)/decades*plot }
	y := func(v float64) float64 { return top + plot - (math.Log10(v)-decadesLow)/decades*plot }
	clamp := func(v float64) float64 { return math.Max(v, math.Pow(10, decadesLow)) }
	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", width, height)
	fmt.Fprintf(&b, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width, height)
	fmt.Fprintf(&b, "<text x=\"%.0f\" y=\"22\" font-size=\"14\">make calibrate: share of drains that lost a request against the risk stated at the stop</text>\n", left)
	// The factor-2 band and the diagonal.
	lo, hi := math.Pow(10, decadesLow), 1.0
	fmt.Fprintf(&b, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"#e8f0e8\"/>\n",
		x(lo), y(lo*2), x(hi/2), y(hi), x(hi), y(hi/2), x(lo*2), y(lo))
	fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n", x(lo), y(lo), x(hi), y(hi))
	for d := decadesLow; d <= 0; d++ {
		v := math.Pow(10, d)
		fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x(v), top, x(v), top+plot)
		fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, y(v), left+plot, y(v))
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">1e%.0f</text>\n", x(v), top+plot+16, d)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">1e%.0f</text>\n", left-6, y(v)+4, d)
	}
	fmt.Fprintf(&b, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#444\"/>\n", left, top, plot, plot)
	fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">mean risk stated at the stop (Decision.Risk)</text>\n", left+plot/2, top+plot+36)
	fmt.Fprintf(&b, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">share of drains with a request after the stop (hollow: none, at 3/n)</text>\n", top+plot/2)
	colours := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}
	shapesSeen, familiesSeen := order(cells, func(c cell) string { return c.shape }), order(cells, func(c cell) string { return c.family })
	for _, c := range cells {
		if c.drains == 0 || c.meanStated() == 0 {
			continue
		}
		colour := colours[index(shapesSeen, c.shape)%len(colours)]
		fill := colour
		if c.lost == 0 {
			fill = "white"
		}
		share := c.lossShare()
		cx := x(clamp(c.meanStated()))
		if c.lost == 0 {
			share = 3 / float64(c.drains)
			fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-opacity=\"0.4\"/>\n", cx, y(clamp(share)), cx, top+plot, colour)
		}
		cy := y(clamp(share))
		b.WriteString(marker(index(familiesSeen, c.family), cx, cy, colour, fill))
	}
	lx, ly := left+plot+20, top+10
	for i, s := range shapesSeen {
		fmt.Fprintf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>\n", lx, ly+float64(i)*18-9, colours[i%len(colours)])
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx+16, ly+float64(i)*18, s)
	}
	ly += float64(len(shapesSeen))*18 + 14
	for i, f := range familiesSeen {
		b.WriteString(marker(i, lx+5, ly+float64(i)*18-4, "#444", "#444"))
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx+16, ly+float64(i)*18, f)
	}
	ly += float64(len(familiesSeen))*18 + 14
	fmt.Fprintf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"#e8f0e8\"/>\n", lx, ly-9)
	fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\">within a factor of 2</text>\n", lx+16, ly)
	b.WriteString("</svg>\n")
	return b.String()
}

// marker is family i's mark: a circle, a square, a triangle.
func marker(i int, cx, cy float64, stroke, fill string) string {
	switch i % 3 {
	case 1:
		return fmt.Sprintf("<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"%s\" stroke=\"%s\"/>\n", cx-4.5, cy-4.5, fill, stroke)
	case 2:
		return fmt.Sprintf("<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\" stroke=\"%s\"/>\n", cx, cy-5.5, cx+5, cy+4, cx-5, cy+4, fill, stroke)
	}
	return fmt.Sprintf("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\" stroke=\"%s\"/>\n", cx, cy, fill, stroke)
}

// order is the distinct values of key over cells, in their first order.
func order(cells []cell, key func(cell) string) []string {
	var out []string
	for _, c := range cells {
		if index(out, key(c)) < 0 {
			out = append(out, key(c))
		}
	}
	return out
}

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
