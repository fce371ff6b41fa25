package podsim

import (
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// The picture of a run: what the table says in numbers, drawn on one time axis so that the
// reason for a row's failures can be seen: the app stopping inside the window in which the
// clients still send, or the sidecar dying inside it. Plain SVG (no script, no web font), so
// that any browser opens the file as it is.

// svgWidth and the margins are in SVG pixels; the lanes are the rows of the picture.
const (
	svgWidth   = 960
	svgLeft    = 128 // lane names
	svgRight   = 24
	svgTop     = 88 // below the title, the summary and the drain regime
	laneHeight = 30
	barHeight  = 18
	charWidth  = 6.6 // of the 12px sans-serif text, to keep labels inside the picture
	// lagBoundRow is the room for the lag bound's label, in a row of its own between the
	// app's stop's and the lanes: the row of the app's stop may hold a label as long as the
	// picture is wide.
	lagBoundRow = 16
)

// Colours of the picture: one per thing drawn, the failure kinds apart.
const (
	colourWindow      = "#fdf0c2"
	colourClients     = "#e0a800"
	colourAppServing  = "#2e9e44"
	colourAppStopping = "#a6dbb0"
	colourSidecar     = "#3b6fd6"
	colourSidecar5xx  = "#b07cd8"
	colourStop        = "#222222"
	colourDeletion    = "#888888"
	colourMixed       = "#555555"
	colourPreStopFail = "#d62728"
	colourLagBound    = "#0b7285"
)

// failureColour is the colour of a client failure kind, so that a cut request and a timeout
// are told apart at a glance.
func failureColour(kind string) string {
	switch kind {
	case failCut:
		return "#d62728"
	case failTimeout:
		return "#ff7f0e"
	case failRefused, fail503:
		return "#9467bd"
	case fail502:
		return "#8c564b"
	case failStreamCut:
		return "#e377c2"
	case failTCPClosed:
		return "#7f0000"
	}
	return colourMixed
}

// svgAxis is the time range, in pod seconds, that every picture of a report shares, so that
// two rows' pictures side by side compare.
type svgAxis struct {
	from, to, step float64
}

// axis covers every moment the results record, from a second before the deletion.
func (r Report) axis() svgAxis {
	end := 1.0
	for _, res := range r.Results {
		end = max(end, res.PodGoneS, res.LastClientLagS, res.AppExitS, res.SidecarExit, res.AppStopS)
		if res.LastFailureS != nil {
			end = max(end, *res.LastFailureS)
		}
	}
	a := svgAxis{from: -1}
	for _, step := range []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300} {
		a.step = step
		if (end+1-a.from)/step <= 14 {
			break
		}
	}
	a.to = math.Ceil((end+a.step/4)/a.step) * a.step
	return a
}

// x is where pod second s is drawn.
func (a svgAxis) x(s float64) float64 {
	s = min(max(s, a.from), a.to)
	return svgLeft + (s-a.from)/(a.to-a.from)*(svgWidth-svgLeft-svgRight)
}

// svgFileName is a row's file name: its place in the table, its strategy and its sidecar.
func svgFileName(i int, res Result) string {
	slug := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
				return r
			}
			return '-'
		}, s)
	}
	return fmt.Sprintf("%02d-%s-%s.svg", i+1, slug(res.Strategy), slug(res.Sidecar))
}

// WriteSVGs draws each run of the report into dir (created if missing), one SVG per row of the
// table, and an index.html that shows them one under the other with the headline. It returns
// the index's path and the SVGs' paths.
func (r Report) WriteSVGs(dir string) (index string, files []string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	a := r.axis()
	var names []string
	for i, res := range r.Results {
		name := svgFileName(i, res)
		path := filepath.Join(dir, name)
		if err := writeFile(path, func(w io.Writer) error { return r.writeSVG(w, res, a) }); err != nil {
			return "", files, err
		}
		names = append(names, name)
		files = append(files, path)
	}
	index = filepath.Join(dir, "index.html")
	if err := writeFile(index, func(w io.Writer) error { return r.writeSVGIndex(w, names) }); err != nil {
		return "", files, err
	}
	return index, files, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// writeSVGIndex writes the page that shows every row's picture under the headline.
func (r Report) writeSVGIndex(w io.Writer, names []string) error {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>meshdrain-sim simulate</title></head>\n")
	b.WriteString("<body style=\"font-family: sans-serif\">\n<h1>meshdrain-sim simulate: one pod deletion per row</h1>\n")
	sc := r.Scenario
	clients, lag := "client sidecars", "EDS lag"
	if r.noSidecar() {
		clients, lag = "clients", "kube-proxy lag"
	}
	fmt.Fprintf(&b, "<p>%g QPS from %d %s, app P99 %s on %d threads, %s %s (last client at %.2fs), time scale %g, seed %d.</p>\n",
		sc.QPS, sc.Clients, clients, html.EscapeString(sc.P99), sc.Threads, lag, html.EscapeString(sc.EDSLag), sc.LastClientLagS, sc.TimeScale, sc.Seed)
	if headline := r.Headline(); len(headline) > 0 {
		b.WriteString("<p>meshdrain against the best sleep, per sidecar setting (clean: no client failure and no 5xx in the sidecar's log):</p>\n<ul>\n")
		for _, h := range headline {
			fmt.Fprintf(&b, "<li><b>%s</b>: %s</li>\n", html.EscapeString(h.Sidecar), html.EscapeString(h.Verdict))
		}
		b.WriteString("</ul>\n")
	}
	for i, name := range names {
		res := r.Results[i]
		fmt.Fprintf(&b, "<h2>%s</h2>\n<img src=\"%s\" alt=\"%s\">\n",
			html.EscapeString(r.rowTitle(res)), html.EscapeString(name), html.EscapeString(r.svgSummary(res)))
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// noSidecar: the report's pod has no sidecar (--mesh none), so nothing of a sidecar is drawn.
func (r Report) noSidecar() bool { return r.Scenario.Mesh == MeshNone }

// rowTitle names a row's run: its strategy, and its sidecar where the pod has one.
func (r Report) rowTitle(res Result) string {
	if r.noSidecar() {
		return res.Strategy + ", no sidecar"
	}
	return fmt.Sprintf("%s, sidecar %s", res.Strategy, res.Sidecar)
}

// svgSummary is a row's numbers in a sentence, the picture's subtitle.
func (r Report) svgSummary(res Result) string {
	failures := "0 client failures"
	if res.ClientFailures > 0 {
		failures = fmt.Sprintf("%d client failures (%s)", res.ClientFailures, kindsText(res.FailuresByKind))
	}
	sidecar5xx := fmt.Sprintf(" %d sidecar 5xx;", res.Sidecar5xx)
	if r.noSidecar() {
		sidecar5xx = ""
	}
	return fmt.Sprintf("%d requests; %s;%s app told to stop at %.2fs; pod gone at %.2fs",
		res.Requests, failures, sidecar5xx, res.AppStopS, res.PodGoneS)
}

// kindNames is "503 UC" for one kind of failure, kindsText for several.
func kindNames(byKind map[string]int) string {
	if len(byKind) != 1 {
		return kindsText(byKind)
	}
	for kind := range byKind {
		short, _, _ := strings.Cut(kind, " (")
		return short
	}
	return ""
}

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

// Lanes of the picture, by name; a pod without a sidecar has no sidecar's lanes.
const (
	laneClients    = "clients"
	laneApp        = "app"
	laneFailures   = "client failures"
	laneSidecar5xx = "sidecar 5xx"
)

// writeSVG draws one run on axis a.
func (r Report) writeSVG(w io.Writer, res Result, a svgAxis) error {
	proxy := "istio-proxy"
	if r.Scenario.Mesh == mesh.Linkerd {
		proxy = "linkerd-proxy"
	}
	noSidecar := r.noSidecar()
	lanes := []string{laneClients, laneApp, proxy, laneFailures, laneSidecar5xx}
	if noSidecar {
		lanes = []string{laneClients, laneApp, laneFailures}
	}
	// The lanes start lower where the lag bound's label needs its row; the labels of the
	// deletion and of the app's stop go in the row above.
	plotTop := float64(svgTop)
	if res.LagBoundS > 0 {
		plotTop += lagBoundRow
	}
	stopRow := float64(svgTop) - 6
	lane := func(name string) (top, textY float64) {
		i := slices.Index(lanes, name)
		top = plotTop + float64(i)*laneHeight + (laneHeight-barHeight)/2
		return top, top + barHeight - 5
	}
	plotBottom := plotTop + float64(len(lanes)*laneHeight)
	axisY := plotBottom + 6
	legendY := axisY + 52
	failedHook := preStopFailure(res)
	keys := legend(res, failedHook, noSidecar)
	height := legendY + 20 + float64(keys[len(keys)-1].row)*legendRowHeight

	var c svgCanvas
	c.raw("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
		svgWidth, height, svgWidth, height)
	c.raw("<title>")
	_ = xml.EscapeText(&c.b, []byte(fmt.Sprintf("%s: %s", r.rowTitle(res), r.svgSummary(res))))
	c.raw("</title>\n")
	c.rect(0, 0, svgWidth, height, "#ffffff", "")
	c.text(8, 20, "start", ` font-size="15" font-weight="bold"`, r.rowTitle(res))
	c.text(8, 40, "start", "", r.svgSummary(res))
	if res.DrainRegime != "" {
		c.text(8, 58, "start", ` fill="#444444" class="drain-regime"`, res.DrainRegime)
	}

	// The window in which clients still send to the pod: an app or sidecar that stops inside
	// it meets requests.
	x0, xLast := a.x(0), a.x(res.LastClientLagS)
	c.rect(x0, plotTop, xLast-x0, plotBottom-plotTop, colourWindow, ` class="clients-window"`)

	// The lag bound meshdrain ran with: past it the hook needs only a quiet window, so a wait
	// that ends after it is the window's, or a client's still opening connections. The line
	// is drawn under the labels, whose halo keeps them readable where it crosses them: it is
	// not a moment of this run, and it falls where the clients' label starts.
	xBound := a.x(res.LagBoundS)
	if res.LagBoundS > 0 {
		c.line(xBound, plotTop-4, xBound, plotBottom, colourLagBound, ` stroke-width="1.5" stroke-dasharray="2,3" class="lag-bound"`)
	}

	for i, name := range lanes {
		_, ty := lane(name)
		c.text(svgLeft-8, ty, "end", "", name)
		c.line(svgLeft, plotTop+float64(i+1)*laneHeight, svgWidth-svgRight, plotTop+float64(i+1)*laneHeight, "#e4e4e4", "")
	}

	// The marks are placed first, so that every label can keep clear of them: the deletion
	// and the app's stop, lines across every lane; the client failures, the times between the
	// first and the last, coloured by kind (the result records the span, not each failure's
	// time), a line across every lane at each end and a bar on their lane; a failed preStop.
	xStop := a.x(res.AppStopS)
	c.marks = append(c.marks, box{x0 - 0.75, stopRow + 2, x0 + 0.75, plotBottom}, box{xStop - 0.75, stopRow + 2, xStop + 0.75, plotBottom})
	appTop, _ := lane(laneApp)
	if failedHook != "" {
		c.marks = append(c.marks, box{xStop - diamondRadius, appTop + barHeight/2 - diamondRadius, xStop + diamondRadius, appTop + barHeight/2 + diamondRadius})
	}
	failed := res.ClientFailures > 0 && res.FirstFailureS != nil && res.LastFailureS != nil
	failColour := colourMixed
	var xFirst, xLastFail float64
	failTop, failTextY := lane(laneFailures)
	if failed {
		if len(res.FailuresByKind) == 1 {
			for kind := range res.FailuresByKind {
				failColour = failureColour(kind)
			}
		}
		xFirst, xLastFail = a.x(*res.FirstFailureS), a.x(*res.LastFailureS)
		c.marks = append(c.marks,
			box{xFirst - 1, plotTop, xFirst + 1, plotBottom},
			box{xLastFail - 1, plotTop, xLastFail + 1, plotBottom},
			box{xFirst - 1.5, failTop, xLastFail + 1.5, failTop + barHeight})
	}

	// Clients: sending since before the deletion until the last one's endpoint update.
	top, ty := lane(laneClients)
	c.rect(a.x(a.from), top, xLast-a.x(a.from), barHeight, colourClients, ` class="clients-send"`)
	sendUntil := "clients still send until the last client's EDS update, %.2fs"
	if noSidecar {
		sendUntil = "nodes and ingresses route to the pod until %.2fs"
	}
	c.label(xLast, ty, fmt.Sprintf(sendUntil, res.LastClientLagS), a.x(a.from))

	// The app: serving until its preStop returned, then finishing what it had until it exited.
	top, ty = lane(laneApp)
	c.rect(a.x(a.from), top, xStop-a.x(a.from), barHeight, colourAppServing, ` class="app-serving"`)
	exit := max(res.AppExitS, res.AppStopS)
	c.rect(xStop, top, a.x(exit)-xStop, barHeight, colourAppStopping, ` class="app-stopping"`)
	appLabel := fmt.Sprintf("exited at %.2fs", res.AppExitS)
	if killedBy := killed(res, "app"); killedBy != "" {
		appLabel = "SIGKILLed " + killedBy
	}
	c.label(a.x(exit), ty, appLabel, xStop)
	// A hook that failed or did not complete: a mark where it ended, on the app's lane.
	if failedHook != "" {
		c.diamond(xStop, appTop+barHeight/2, colourPreStopFail, ` class="prestop-failed"`)
	}

	// The sidecar: alive until it exited or was killed.
	if !noSidecar {
		top, ty = lane(proxy)
		xSide := a.x(res.SidecarExit)
		c.rect(a.x(a.from), top, xSide-a.x(a.from), barHeight, colourSidecar, ` class="sidecar-alive"`)
		sideLabel := fmt.Sprintf("exited at %.2fs", res.SidecarExit)
		if killedBy := killed(res, "envoy", proxy); killedBy != "" {
			sideLabel = "SIGKILLed " + killedBy
		}
		c.label(xSide, ty, sideLabel, a.x(a.from))
	}

	if failed {
		for _, x := range []float64{xFirst, xLastFail} {
			c.line(x, plotTop, x, plotBottom, failColour, ` stroke-width="2" class="failure"`)
		}
		c.rect(xFirst-1.5, failTop, xLastFail-xFirst+3, barHeight, failColour, ` class="failures"`)
		span := fmt.Sprintf("%.2fs", *res.FirstFailureS)
		if *res.LastFailureS > *res.FirstFailureS {
			span = fmt.Sprintf("%.2f-%.2fs", *res.FirstFailureS, *res.LastFailureS)
		}
		c.label(xLastFail+1.5, failTextY, fmt.Sprintf("%d failed (%s) at %s", res.ClientFailures, kindNames(res.FailuresByKind), span), xFirst)
	} else {
		c.note(failTextY, "none")
	}

	// The sidecar's 5xx: the app refused while the sidecar was alive and clients still sent.
	if !noSidecar {
		top, ty = lane(laneSidecar5xx)
		refusedUntil := min(res.LastClientLagS, res.SidecarExit)
		switch {
		case res.Sidecar5xx > 0 && refusedUntil > res.AppStopS:
			c.rect(xStop, top, a.x(refusedUntil)-xStop, barHeight, colourSidecar5xx, ` class="sidecar-5xx"`)
			c.label(a.x(refusedUntil), ty, fmt.Sprintf("%d 5xx (UF %d refused, UC %d reset): the app stopped while clients sent", res.Sidecar5xx, res.SidecarUF, res.SidecarUC), xStop)
		case res.Sidecar5xx > 0:
			c.label(svgLeft, ty, fmt.Sprintf("%d 5xx (UF %d, UC %d)", res.Sidecar5xx, res.SidecarUF, res.SidecarUC), svgLeft)
		default:
			c.note(ty, "none")
		}
	}

	if res.LagBoundS > 0 {
		c.label(xBound, plotTop-6, fmt.Sprintf("lag bound %.2fs: past it, a quiet window ends the wait", res.LagBoundS), xBound)
	}

	// The deletion, and the moment the app was told to stop.
	c.line(x0, stopRow+2, x0, plotBottom, colourDeletion, ` stroke-width="1.5" class="deletion"`)
	c.text(x0-3, stopRow, "end", ` fill="#666666"`, "pod deleted")
	c.line(xStop, stopRow+2, xStop, plotBottom, colourStop, ` stroke-width="1.5" stroke-dasharray="5,3" class="app-stop"`)
	c.label(xStop, stopRow, stopCause(res), xStop)

	// The time axis, in pod seconds.
	c.line(svgLeft, axisY, svgWidth-svgRight, axisY, "#444444", "")
	for s := math.Ceil(a.from/a.step) * a.step; s <= a.to+a.step/1000; s += a.step {
		x := a.x(s)
		c.line(x, axisY, x, axisY+4, "#444444", "")
		c.text(x, axisY+16, "middle", "", fmt.Sprintf("%gs", s+0)) // +0: no "-0s"
	}
	c.text((svgLeft+svgWidth-svgRight)/2, axisY+32, "middle", ` fill="#444444"`, "pod seconds from the deletion")

	// The legend.
	for _, e := range keys {
		y := legendY + float64(e.row)*legendRowHeight
		switch e.key {
		case keySwatch:
			c.rect(e.x, y-10, 12, 12, e.colour, "")
		case keyDiamond:
			c.diamond(e.x+6, y-4, e.colour, "")
		case keyDash:
			c.line(e.x, y-4, e.x+12, y-4, e.colour, ` stroke-width="1.5" stroke-dasharray="5,3"`)
		case keyDots:
			c.line(e.x, y-4, e.x+12, y-4, e.colour, ` stroke-width="1.5" stroke-dasharray="2,3"`)
		}
		c.text(e.x+16, y, "start", "", e.name)
	}

	c.raw("</svg>\n")
	_, err := io.WriteString(w, c.b.String())
	return err
}

// legendKey is one entry of the legend: what it shows, its name, and where it goes.
type legendKey struct {
	key    string // keySwatch, keyDiamond, keyDash or keyDots
	colour string
	name   string
	x      float64
	row    int
}

const (
	keySwatch       = "swatch"
	keyDiamond      = "diamond"
	keyDash         = "dash"
	keyDots         = "dots"
	legendRowHeight = 18
)

// legend is the picture's key, with this row's failure kinds and marks, laid out in as many
// rows as its width needs.
func legend(res Result, failedHook string, noSidecar bool) []legendKey {
	keys := []legendKey{
		{key: keySwatch, colour: colourWindow, name: "clients still send"},
		{key: keySwatch, colour: colourAppServing, name: "app serving"},
		{key: keySwatch, colour: colourAppStopping, name: "app finishing"},
	}
	if !noSidecar {
		keys = append(keys, legendKey{key: keySwatch, colour: colourSidecar, name: "sidecar alive"})
	}
	kinds := make([]string, 0, len(res.FailuresByKind))
	for kind := range res.FailuresByKind {
		kinds = append(kinds, kind)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		short, _, _ := strings.Cut(kind, " (")
		keys = append(keys, legendKey{key: keySwatch, colour: failureColour(kind), name: short})
	}
	if res.Sidecar5xx > 0 {
		keys = append(keys, legendKey{key: keySwatch, colour: colourSidecar5xx, name: "sidecar 5xx"})
	}
	if failedHook != "" {
		keys = append(keys, legendKey{key: keyDiamond, colour: colourPreStopFail, name: failedHook})
	}
	keys = append(keys, legendKey{key: keyDash, colour: colourStop, name: "app told to stop"})
	if res.LagBoundS > 0 {
		keys = append(keys, legendKey{key: keyDots, colour: colourLagBound, name: "lag bound (--eds-lag-bound)"})
	}
	x, row := 8.0, 0
	for i := range keys {
		width := 16 + float64(len(keys[i].name))*charWidth
		if x > 8 && x+width > svgWidth-8 {
			x, row = 8, row+1
		}
		keys[i].x, keys[i].row = x, row
		x += width + 14
	}
	return keys
}

// diamondRadius is the half-width of a failed preStop's mark.
const diamondRadius = 6

// diamond draws a failed preStop's mark centred on x, y.
func (c *svgCanvas) diamond(x, y float64, fill, extra string) {
	const r = diamondRadius
	c.raw("<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"1.5\"%s/>\n",
		x, y-r, x+r, y, x, y+r, x-r, y, fill, extra)
}

// preStopFailure is what the kubelet makes of a preStop hook that did not return cleanly, ""
// for one that did: one that exited non-zero failed (a FailedPreStopHook event; the app gets
// its SIGTERM all the same), one still running at the end of the grace period did not
// complete (the kubelet logs it and kills the container).
func preStopFailure(res Result) string {
	switch {
	case res.PreStopError == "":
		return ""
	case res.PreStopError == errPreStopKilled.Error():
		return "preStop not completed"
	case res.Meshdrain != nil && res.Meshdrain.ExitCode > 0:
		return fmt.Sprintf("preStop failed (exit %d)", res.Meshdrain.ExitCode)
	}
	return "preStop failed"
}

// killed is "by kubelet at 52.0s" when the result's kill list names one of the containers.
func killed(res Result, containers ...string) string {
	for _, detail := range res.KilledDetail {
		for _, name := range containers {
			if rest, ok := strings.CutPrefix(detail, name+" "); ok {
				return rest
			}
		}
	}
	return ""
}

// stopCause says who told the app to stop, and when: the label of the dashed line.
func stopCause(res Result) string {
	switch failure := preStopFailure(res); {
	case failure == "":
	case res.PreStopError == errPreStopKilled.Error():
		return fmt.Sprintf("%s: app SIGKILLed at the grace period, %.2fs", failure, res.AppStopS)
	case res.Meshdrain != nil && res.Meshdrain.ExitCode > 0:
		return fmt.Sprintf("preStop failed (meshdrain exit %d, %s): SIGTERM to the app at %.2fs", res.Meshdrain.ExitCode, res.Meshdrain.Reason, res.AppStopS)
	default:
		return fmt.Sprintf("%s: SIGTERM to the app at %.2fs", failure, res.AppStopS)
	}
	by := "preStop " + res.Strategy + " returned"
	if strat, err := ParseStrategy(res.Strategy); err == nil {
		switch strat.Kind {
		case StrategyMeshdrain:
			by = "meshdrain returned"
			if res.Meshdrain != nil {
				by = fmt.Sprintf("meshdrain returned (%s)", res.Meshdrain.Reason)
			}
		case StrategySleep:
			by = "sleep " + fmtD(strat.Sleep) + " over"
		case StrategyOracle:
			by = "oracle: the last request answered"
		case StrategyNone:
			by = "no preStop"
		}
	}
	return fmt.Sprintf("%s: SIGTERM to the app at %.2fs", by, res.AppStopS)
}
