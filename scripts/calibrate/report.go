package main

import (
	"fmt"
	"io"
	"strconv"
)

// printTable writes the reliability table: per shape, family and risk, the share of drains
// that lost a request against the mean risk stated at the stop, and their ratio, which the
// issue wants within a factor of 2.
func printTable(w io.Writer, cells []cell) {
	fmt.Fprintln(w, "| shape | lag family | --risk | drains | lost | loss share | mean stated risk | loss / stated | mean stop (s) |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %s | %s | %s | %.2f |\n", c.shape, c.family, sci(c.risk), c.drains, c.lost,
			sci(c.lossShare()), sci(c.meanStated()), ratio(c), c.meanStop())
	}
}

// ratio is the loss share over the mean stated risk, or what bounds it when no drain lost.
func ratio(c cell) string {
	if c.meanStated() == 0 {
		return "-"
	}
	if c.lost == 0 {
		// No loss in n drains: the share is below 3/n with 95% confidence.
		return "< " + strconv.FormatFloat(3/float64(c.drains)/c.meanStated(), 'g', 2, 64)
	}
	return strconv.FormatFloat(c.lossShare()/c.meanStated(), 'g', 2, 64)
}

func sci(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'e', 1, 64)
}
