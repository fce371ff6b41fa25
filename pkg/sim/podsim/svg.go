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

// Lanes of the picture, by name; a pod without a sidecar has no sidecar's lanes.
const (
	laneClients    = "clients"
	laneApp        = "app"
	laneFailures   = "client failures"
	laneSidecar5xx = "sidecar 5xx"
)

// writeSVG draws one run on axis a.
func (r Report) writeSVG(w io.Writer, res Result, a svgAxis) error {
	t := r.newTimeline(res, a)
	keys := legend(res, t.failedHook, t.noSidecar)
	axisY := t.plotBottom + 6
	legendY := axisY + 52
	height := legendY + 20 + float64(keys[len(keys)-1].row)*legendRowHeight

	r.drawHeading(&t.svgCanvas, res, height)
	t.drawBackdrop()
	// The marks are placed first, so that every label can keep clear of them.
	t.placeMarks()
	t.drawClients()
	t.drawApp()
	t.drawSidecar()
	t.drawFailures()
	t.drawSidecar5xx()
	t.drawMoments()
	t.drawAxis(axisY)
	t.drawLegend(keys, legendY)
	t.raw("</svg>\n")
	_, err := io.WriteString(w, t.b.String())
	return err
}

// timeline is one run's picture as it is drawn: its lanes, where they are, and where the
// moments drawn across them fall.
type timeline struct {
	svgCanvas
	res Result
	a   svgAxis
	// proxy is the sidecar's lane, named after its container.
	proxy     string
	noSidecar bool
	lanes     []string
	// plotTop and plotBottom bound the lanes; stopRow is the baseline of the labels of the
	// deletion and of the app's stop, above them.
	plotTop, plotBottom, stopRow float64
	// failedHook is how the preStop failed, "" when it returned cleanly.
	failedHook string
	// The deletion, the last client's endpoint update, the app's stop and the lag bound.
	x0, xLast, xStop, xBound float64

	failures failureSpan
}

// failureSpan is where the client failures are drawn: the result records the span from the
// first to the last, not each failure's time.
type failureSpan struct {
	shown         bool
	colour        string // the one kind's, or mixed
	xFirst, xLast float64
}

func (r Report) newTimeline(res Result, a svgAxis) *timeline {
	t := &timeline{res: res, a: a, proxy: "istio-proxy", noSidecar: r.noSidecar(), failedHook: preStopFailure(res)}
	if r.Scenario.Mesh == mesh.Linkerd {
		t.proxy = "linkerd-proxy"
	}
	t.lanes = []string{laneClients, laneApp, t.proxy, laneFailures, laneSidecar5xx}
	if t.noSidecar {
		t.lanes = []string{laneClients, laneApp, laneFailures}
	}
	// The lanes start lower where the lag bound's label needs its row; the labels of the
	// deletion and of the app's stop go in the row above.
	t.plotTop = svgTop
	if res.LagBoundS > 0 {
		t.plotTop += lagBoundRow
	}
	t.stopRow = svgTop - 6
	t.plotBottom = t.plotTop + float64(len(t.lanes)*laneHeight)
	t.x0, t.xLast, t.xStop, t.xBound = a.x(0), a.x(res.LastClientLagS), a.x(res.AppStopS), a.x(res.LagBoundS)
	if res.ClientFailures > 0 && res.FirstFailureS != nil && res.LastFailureS != nil {
		t.failures = failureSpan{shown: true, colour: colourMixed, xFirst: a.x(*res.FirstFailureS), xLast: a.x(*res.LastFailureS)}
		if len(res.FailuresByKind) == 1 {
			for kind := range res.FailuresByKind {
				t.failures.colour = failureColour(kind)
			}
		}
	}
	return t
}

// lane is where a lane's bar starts and its label's baseline.
func (t *timeline) lane(name string) (top, textY float64) {
	i := slices.Index(t.lanes, name)
	top = t.plotTop + float64(i)*laneHeight + (laneHeight-barHeight)/2
	return top, top + barHeight - 5
}

// start is where every bar starts: before the deletion, at the axis's first moment.
func (t *timeline) start() float64 { return t.a.x(t.a.from) }

// drawHeading opens the picture: its title (what a browser's tab and a screen reader show),
// and above the lanes the row's name, its summary and its drain regime.
func (r Report) drawHeading(c *svgCanvas, res Result, height float64) {
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
}

// drawBackdrop draws what the run is read against: the window in which clients still send,
// the lag bound, and the lanes.
func (t *timeline) drawBackdrop() {
	// The window in which clients still send to the pod: an app or sidecar that stops inside
	// it meets requests.
	t.rect(t.x0, t.plotTop, t.xLast-t.x0, t.plotBottom-t.plotTop, colourWindow, ` class="clients-window"`)

	// The lag bound meshdrain ran with: past it the hook needs only a quiet window, so a wait
	// that ends after it is the window's, or a client's still opening connections. The line
	// is drawn under the labels, whose halo keeps them readable where it crosses them: it is
	// not a moment of this run, and it falls where the clients' label starts.
	if t.res.LagBoundS > 0 {
		t.line(t.xBound, t.plotTop-4, t.xBound, t.plotBottom, colourLagBound, ` stroke-width="1.5" stroke-dasharray="2,3" class="lag-bound"`)
	}

	for i, name := range t.lanes {
		_, ty := t.lane(name)
		t.text(svgLeft-8, ty, "end", "", name)
		t.line(svgLeft, t.plotTop+float64(i+1)*laneHeight, svgWidth-svgRight, t.plotTop+float64(i+1)*laneHeight, "#e4e4e4", "")
	}
}

// placeMarks places the marks no label may cross: the deletion and the app's stop, lines
// across every lane; the client failures, a line across every lane at each end of their span
// and a bar on their lane; a failed preStop.
func (t *timeline) placeMarks() {
	x0, xStop := t.x0, t.xStop
	t.marks = append(t.marks, box{x0 - 0.75, t.stopRow + 2, x0 + 0.75, t.plotBottom}, box{xStop - 0.75, t.stopRow + 2, xStop + 0.75, t.plotBottom})
	if t.failedHook != "" {
		appTop, _ := t.lane(laneApp)
		t.marks = append(t.marks, box{xStop - diamondRadius, appTop + barHeight/2 - diamondRadius, xStop + diamondRadius, appTop + barHeight/2 + diamondRadius})
	}
	if f := t.failures; f.shown {
		failTop, _ := t.lane(laneFailures)
		t.marks = append(t.marks,
			box{f.xFirst - 1, t.plotTop, f.xFirst + 1, t.plotBottom},
			box{f.xLast - 1, t.plotTop, f.xLast + 1, t.plotBottom},
			box{f.xFirst - 1.5, failTop, f.xLast + 1.5, failTop + barHeight})
	}
}

// drawClients: sending since before the deletion until the last one's endpoint update.
func (t *timeline) drawClients() {
	top, ty := t.lane(laneClients)
	t.rect(t.start(), top, t.xLast-t.start(), barHeight, colourClients, ` class="clients-send"`)
	sendUntil := "clients still send until the last client's EDS update, %.2fs"
	if t.noSidecar {
		sendUntil = "nodes and ingresses route to the pod until %.2fs"
	}
	t.label(t.xLast, ty, fmt.Sprintf(sendUntil, t.res.LastClientLagS), t.start())
}

// drawApp: serving until its preStop returned, then finishing what it had until it exited.
func (t *timeline) drawApp() {
	res := t.res
	top, ty := t.lane(laneApp)
	t.rect(t.start(), top, t.xStop-t.start(), barHeight, colourAppServing, ` class="app-serving"`)
	exit := max(res.AppExitS, res.AppStopS)
	t.rect(t.xStop, top, t.a.x(exit)-t.xStop, barHeight, colourAppStopping, ` class="app-stopping"`)
	appLabel := fmt.Sprintf("exited at %.2fs", res.AppExitS)
	if killedBy := killed(res, "app"); killedBy != "" {
		appLabel = "SIGKILLed " + killedBy
	}
	t.label(t.a.x(exit), ty, appLabel, t.xStop)
	// A hook that failed or did not complete: a mark where it ended, on the app's lane.
	if t.failedHook != "" {
		t.diamond(t.xStop, top+barHeight/2, colourPreStopFail, ` class="prestop-failed"`)
	}
}

// drawSidecar: alive until it exited or was killed.
func (t *timeline) drawSidecar() {
	if t.noSidecar {
		return
	}
	top, ty := t.lane(t.proxy)
	xSide := t.a.x(t.res.SidecarExit)
	t.rect(t.start(), top, xSide-t.start(), barHeight, colourSidecar, ` class="sidecar-alive"`)
	sideLabel := fmt.Sprintf("exited at %.2fs", t.res.SidecarExit)
	if killedBy := killed(t.res, "envoy", t.proxy); killedBy != "" {
		sideLabel = "SIGKILLed " + killedBy
	}
	t.label(xSide, ty, sideLabel, t.start())
}

// drawFailures: the client failures' span, coloured by kind, or "none".
func (t *timeline) drawFailures() {
	res, f := t.res, t.failures
	failTop, failTextY := t.lane(laneFailures)
	if !f.shown {
		t.note(failTextY, "none")
		return
	}
	for _, x := range []float64{f.xFirst, f.xLast} {
		t.line(x, t.plotTop, x, t.plotBottom, f.colour, ` stroke-width="2" class="failure"`)
	}
	t.rect(f.xFirst-1.5, failTop, f.xLast-f.xFirst+3, barHeight, f.colour, ` class="failures"`)
	span := fmt.Sprintf("%.2fs", *res.FirstFailureS)
	if *res.LastFailureS > *res.FirstFailureS {
		span = fmt.Sprintf("%.2f-%.2fs", *res.FirstFailureS, *res.LastFailureS)
	}
	t.label(f.xLast+1.5, failTextY, fmt.Sprintf("%d failed (%s) at %s", res.ClientFailures, kindNames(res.FailuresByKind), span), f.xFirst)
}

// drawSidecar5xx: the app refused while the sidecar was alive and clients still sent.
func (t *timeline) drawSidecar5xx() {
	if t.noSidecar {
		return
	}
	res := t.res
	top, ty := t.lane(laneSidecar5xx)
	refusedUntil := min(res.LastClientLagS, res.SidecarExit)
	switch {
	case res.Sidecar5xx > 0 && refusedUntil > res.AppStopS:
		t.rect(t.xStop, top, t.a.x(refusedUntil)-t.xStop, barHeight, colourSidecar5xx, ` class="sidecar-5xx"`)
		t.label(t.a.x(refusedUntil), ty, fmt.Sprintf("%d 5xx (UF %d refused, UC %d reset): the app stopped while clients sent", res.Sidecar5xx, res.SidecarUF, res.SidecarUC), t.xStop)
	case res.Sidecar5xx > 0:
		t.label(svgLeft, ty, fmt.Sprintf("%d 5xx (UF %d, UC %d)", res.Sidecar5xx, res.SidecarUF, res.SidecarUC), svgLeft)
	default:
		t.note(ty, "none")
	}
}

// drawMoments labels the lag bound, and draws the deletion and the moment the app was told
// to stop, across every lane.
func (t *timeline) drawMoments() {
	if t.res.LagBoundS > 0 {
		t.label(t.xBound, t.plotTop-6, fmt.Sprintf("lag bound %.2fs: past it, a quiet window ends the wait", t.res.LagBoundS), t.xBound)
	}
	t.line(t.x0, t.stopRow+2, t.x0, t.plotBottom, colourDeletion, ` stroke-width="1.5" class="deletion"`)
	t.text(t.x0-3, t.stopRow, "end", ` fill="#666666"`, "pod deleted")
	t.line(t.xStop, t.stopRow+2, t.xStop, t.plotBottom, colourStop, ` stroke-width="1.5" stroke-dasharray="5,3" class="app-stop"`)
	t.label(t.xStop, t.stopRow, stopCause(t.res), t.xStop)
}

// drawAxis draws the time axis, in pod seconds, at y.
func (t *timeline) drawAxis(y float64) {
	a := t.a
	t.line(svgLeft, y, svgWidth-svgRight, y, "#444444", "")
	for s := math.Ceil(a.from/a.step) * a.step; s <= a.to+a.step/1000; s += a.step {
		x := a.x(s)
		t.line(x, y, x, y+4, "#444444", "")
		t.text(x, y+16, "middle", "", fmt.Sprintf("%gs", s+0)) // +0: no "-0s"
	}
	t.text((svgLeft+svgWidth-svgRight)/2, y+32, "middle", ` fill="#444444"`, "pod seconds from the deletion")
}

// drawLegend draws the keys, their first row's baseline at top.
func (t *timeline) drawLegend(keys []legendKey, top float64) {
	for _, e := range keys {
		y := top + float64(e.row)*legendRowHeight
		switch e.key {
		case keySwatch:
			t.rect(e.x, y-10, 12, 12, e.colour, "")
		case keyDiamond:
			t.diamond(e.x+6, y-4, e.colour, "")
		case keyDash:
			t.line(e.x, y-4, e.x+12, y-4, e.colour, ` stroke-width="1.5" stroke-dasharray="5,3"`)
		case keyDots:
			t.line(e.x, y-4, e.x+12, y-4, e.colour, ` stroke-width="1.5" stroke-dasharray="2,3"`)
		}
		t.text(e.x+16, y, "start", "", e.name)
	}
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
				by = fmt.Sprintf("meshdrain returned (%s%s)", res.Meshdrain.Reason, res.Meshdrain.statedRisk())
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
