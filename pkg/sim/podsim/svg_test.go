package podsim

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func ptr(f float64) *float64 { return &f }

// regimeA is what every row of the demo ran: classic sidecars, drained at the deletion.
var regimeA = drainRegime(IstioDefaultSidecar(), Strategy{Kind: StrategyMeshdrain})

// demoReport is the default demo's results as docs/simulator.md shows them: Envoy killed at
// 5 s under Istio's defaults, a clean meshdrain at 8.45 s under the recommended sidecar.
func demoReport() Report {
	istio := func(strategy string, failures, sidecar5xx int, stop, sideExit float64) Result {
		res := Result{Strategy: strategy, Sidecar: "istio-default", Requests: 3055, Sidecar5xx: sidecar5xx, SidecarUF: sidecar5xx,
			ClientFailures: failures, AppStopS: stop, AppExitS: max(stop, sideExit) + 0.3, SidecarExit: sideExit,
			PodGoneS: max(stop, sideExit) + 0.3, LastClientLagS: 7.58, GracePeriodS: 30,
			Killed: true, KilledDetail: []string{"envoy by pilot-agent at 5.0s"}, DrainRegime: regimeA}
		if failures > 0 {
			res.FailuresByKind = map[string]int{failCut: failures}
			res.FirstFailureS, res.LastFailureS = ptr(5.01), ptr(5.02)
		}
		return res
	}
	recommended := func(strategy string, sidecar5xx int, stop float64) Result {
		return Result{Strategy: strategy, Sidecar: "recommended", Requests: 3055, Sidecar5xx: sidecar5xx, SidecarUF: sidecar5xx,
			AppStopS: stop, AppExitS: stop + 0.02, SidecarExit: 52.02, PodGoneS: 52.02, LastClientLagS: 7.58, GracePeriodS: 52,
			Killed: true, KilledDetail: []string{"istio-proxy by kubelet and pilot-agent at 52.0s"}, DrainRegime: regimeA}
	}
	// Envoy killed under it at 5 s while requests arrived: meshdrain says so and exits 5.
	busy := istio("meshdrain", 14, 0, 5.18, 5.0)
	busy.Meshdrain = &MeshdrainEvent{Reason: "sidecar-gone-busy", ElapsedPodS: 5.17, ExitCode: 5}
	busy.PreStopError = "meshdrain exited 5"
	md := recommended("meshdrain", 0, 8.45)
	md.Meshdrain = &MeshdrainEvent{Reason: "quiet", ElapsedPodS: 8.43}
	md.Timeline = []Event{{AtS: 0, Who: "kubelet", What: "pod deleted"}, {AtS: 8.45, Who: "meshdrain", What: "drain finished: reason=quiet"}}
	return Report{
		Scenario: ScenarioSummary{Traffic: "steady", QPS: 800, Clients: 50, Threads: 200, P99: "450ms", AppShutdown: "graceful",
			EDSLag: "p50=1.5s,p99=12s", LastClientLagS: 7.58, Retries: 2, RouteTimeout: "0s", GracePeriod: "30s", TimeScale: 0.25, Seed: 1},
		Sidecars: []SidecarNote{{Name: "istio-default", Note: "Istio defaults"}, {Name: "recommended", Note: "from meshdrain plan"}},
		Results: []Result{
			istio("none", 1, 1400, 0, 5.0),
			istio("sleep:5s", 12, 0, 5.0, 5.0),
			istio("sleep:15s", 14, 0, 15.0, 5.0),
			busy,
			recommended("none", 1497, 0),
			recommended("sleep:5s", 95, 5.01),
			recommended("sleep:15s", 0, 15.01),
			md,
		},
	}
}

// TestHeadline: the headline says per sidecar setting what the table only shows: under
// Istio's defaults no preStop helps (the sidecar dies while clients send); under the
// recommended one meshdrain is clean and stops the app sooner than the shortest clean sleep.
func TestHeadline(t *testing.T) {
	got := demoReport().Headline()
	want := []HeadlineItem{
		{"istio-default", "Envoy died at 5.00s while clients sent until 7.58s: whatever the app did, no strategy was clean " +
			"(none lost 1, sleep:5s lost 12, sleep:15s lost 14, meshdrain lost 14); fix the sidecar first: meshdrain plan."},
		{"recommended", "meshdrain clean, app stopped at 8.45s; best clean sleep: sleep:15s at 15.01s, meshdrain 6.56s sooner; " +
			"shorter sleeps were not clean: sleep:5s 95 sidecar 5xx"},
	}
	if len(got) != len(want) {
		t.Fatalf("headline = %q, want %d items", got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("headline item %d:\n got %q\nwant %q", i, got[i], want[i])
		}
	}
}

// TestHeadlineCases: what the headline says when the demo's clear outcome does not hold.
func TestHeadlineCases(t *testing.T) {
	rows := func(edit func([]Result)) Report {
		r := demoReport()
		edit(r.Results)
		return r
	}
	for _, tc := range []struct {
		name    string
		report  Report
		sidecar string
		want    []string
		notWant []string
	}{{
		// Envoy outlived the last client: the strategies are compared, not the sidecar blamed.
		name: "sidecar outlived the clients",
		report: rows(func(rs []Result) {
			for i := range 4 {
				rs[i].SidecarExit = 9
			}
		}),
		sidecar: "istio-default",
		want:    []string{"meshdrain lost 14, app stopped at 5.18s", "no sleep was clean: sleep:5s lost 12, sleep:15s lost 14"},
		notWant: []string{"fix the sidecar"},
	}, {
		// One clean row under Istio's defaults: the sidecar was not in the way of that one.
		name:    "one clean row",
		report:  rows(func(rs []Result) { rs[2].ClientFailures, rs[2].FailuresByKind = 0, nil }),
		sidecar: "istio-default",
		want:    []string{"best clean sleep: sleep:15s at 15.00s"},
		notWant: []string{"fix the sidecar", "sooner"},
	}, {
		name:    "meshdrain later than a clean sleep",
		report:  rows(func(rs []Result) { rs[5].Sidecar5xx = 0 }),
		sidecar: "recommended",
		want:    []string{"best clean sleep: sleep:5s at 5.01s, meshdrain 3.44s later"},
		notWant: []string{"shorter sleeps"},
	}, {
		name:    "meshdrain not clean",
		report:  rows(func(rs []Result) { rs[7].ClientFailures = 3 }),
		sidecar: "recommended",
		want:    []string{"meshdrain lost 3, app stopped at 8.45s; best clean sleep: sleep:15s at 15.01s;"},
		notWant: []string{"sooner", "later"},
	}, {
		name:    "a late timer",
		report:  rows(func(rs []Result) { rs[6].Warnings = []string{"sleep returned at 15.81s instead of 15.00s"} }),
		sidecar: "recommended",
		want:    []string{"meshdrain 6.56s sooner", "WARNING: timers fired late"},
	}, {
		name: "strategies without meshdrain or a sleep",
		report: Report{Results: []Result{
			{Strategy: "none", Sidecar: "native", Sidecar5xx: 7, AppStopS: 0, SidecarExit: 0.4, LastClientLagS: 3},
			{Strategy: "oracle", Sidecar: "native", AppStopS: 3.2, SidecarExit: 3.3, LastClientLagS: 3},
		}},
		sidecar: "native",
		want:    []string{"oracle (the earliest stop that loses nothing) clean at 3.20s"},
	}, {
		name: "linkerd",
		report: func() Report {
			r := demoReport()
			r.Scenario.Mesh = "linkerd"
			return r
		}(),
		sidecar: "istio-default",
		want:    []string{"linkerd-proxy died at 5.00s", "meshdrain plan --mesh linkerd."},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var verdict string
			for _, h := range tc.report.Headline() {
				if h.Sidecar == tc.sidecar {
					verdict = h.Verdict
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(verdict, w) {
					t.Errorf("%s: %q\nlacks %q", tc.sidecar, verdict, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(verdict, w) {
					t.Errorf("%s: %q\nsays %q", tc.sidecar, verdict, w)
				}
			}
		})
	}
}

// TestWriteTableHeadlineFirst: the text report opens with the headline, keeps the table,
// and prints the timelines only when asked.
func TestWriteTableHeadlineFirst(t *testing.T) {
	r := demoReport()
	var short, long bytes.Buffer
	if err := r.WriteTable(&short, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteTable(&long, TableOptions{Timelines: true}); err != nil {
		t.Fatal(err)
	}
	out := short.String()
	head, table := strings.Index(out, "meshdrain against the best sleep"), strings.Index(out, "STRATEGY")
	if head != 0 || table < 0 {
		t.Fatalf("headline at %d, table at %d; want the headline first:\n%s", head, table, out)
	}
	for _, line := range strings.Split(out[:strings.Index(out, "Pod deletion replayed")], "\n") {
		if len(line) > headlineWidth {
			t.Errorf("headline line of %d columns, wider than the table: %q", len(line), line)
		}
	}
	if !strings.Contains(out[:table], "  recommended    meshdrain clean, app stopped at 8.45s") {
		t.Errorf("no recommended headline before the table:\n%s", out[:table])
	}
	const timelineLine = "8.45s  meshdrain    drain finished: reason=quiet"
	if strings.Contains(out, timelineLine) || strings.Contains(out, "meshdrain, sidecar recommended:") {
		t.Errorf("timelines printed without TableOptions.Timelines:\n%s", out)
	}
	if !strings.Contains(long.String(), timelineLine) || !strings.HasPrefix(long.String(), out) {
		t.Errorf("with Timelines: want the same report followed by the timelines:\n%s", long.String())
	}
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("%d lines without the timelines; the point must fit a screen:\n%s", n, out)
	}
}

// svgElement is one element of a decoded SVG.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
}

// decodeSVG checks that data is well-formed XML with an <svg> root in the SVG namespace and
// returns its elements in document order.
func decodeSVG(t *testing.T, data []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var elems []svgElement
	var open []int
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, data)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(elems) == 0 && (e.name != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %s in %q, want svg in the SVG namespace", e.name, tok.Name.Space)
			}
			elems = append(elems, e)
			open = append(open, len(elems)-1)
		case xml.CharData:
			if len(open) > 0 {
				elems[open[len(open)-1]].text += string(tok)
			}
		case xml.EndElement:
			open = open[:len(open)-1]
		}
	}
	return elems
}

// byClass is the elements with the given class.
func byClass(elems []svgElement, class string) []svgElement {
	var out []svgElement
	for _, e := range elems {
		if e.attrs["class"] == class {
			out = append(out, e)
		}
	}
	return out
}

func attrF(t *testing.T, e svgElement, name string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(e.attrs[name], 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", e.name, name, e.attrs[name], err)
	}
	return f
}

// TestWriteSVGs: one self-contained SVG per row of the table, each well-formed, drawing the
// row's moments where the result puts them on an axis all rows share, and an index page.
func TestWriteSVGs(t *testing.T) {
	r := demoReport()
	dir := filepath.Join(t.TempDir(), "svg") // created by WriteSVGs
	index, files, err := r.WriteSVGs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(r.Results) {
		t.Fatalf("%d files for %d rows", len(files), len(r.Results))
	}
	if filepath.Base(files[1]) != "02-sleep-5s-istio-default.svg" || filepath.Base(files[7]) != "08-meshdrain-recommended.svg" {
		t.Errorf("file names %v: want the row's place, strategy and sidecar", files)
	}
	a := r.axis()
	if a.from != -1 || a.to < 52.02 || a.to > 60 {
		t.Errorf("axis %+v: want from -1s to just past the last pod gone (52.02s)", a)
	}
	near := func(got, want float64) bool { return got > want-0.11 && got < want+0.11 }
	for i, path := range files {
		res := r.Results[i]
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(data); strings.Contains(s, "<script") || strings.Contains(s, "@import") || strings.Contains(s, "href") {
			t.Errorf("%s is not self-contained plain SVG", path)
		}
		elems := decodeSVG(t, data)
		var title string
		texts := map[string]bool{}
		for _, e := range elems {
			if e.name == "title" {
				title = e.text
			}
			if e.name == "text" {
				texts[e.text] = true
			}
		}
		if !strings.HasPrefix(title, res.Strategy+", sidecar "+res.Sidecar+": ") {
			t.Errorf("%s: title %q", path, title)
		}

		// The window in which clients still send: from the deletion to the last client's update.
		window := byClass(elems, "clients-window")
		if len(window) != 1 || !near(attrF(t, window[0], "x"), a.x(0)) || !near(attrF(t, window[0], "x")+attrF(t, window[0], "width"), a.x(res.LastClientLagS)) {
			t.Errorf("%s: clients-window %+v, want x %.1f to %.1f", path, window, a.x(0), a.x(res.LastClientLagS))
		}
		serving, sidecar := byClass(elems, "app-serving"), byClass(elems, "sidecar-alive")
		if len(serving) != 1 || !near(attrF(t, serving[0], "x")+attrF(t, serving[0], "width"), a.x(res.AppStopS)) {
			t.Errorf("%s: app-serving %+v, want it to end at the app's stop %.2fs (x %.1f)", path, serving, res.AppStopS, a.x(res.AppStopS))
		}
		if len(sidecar) != 1 || !near(attrF(t, sidecar[0], "x")+attrF(t, sidecar[0], "width"), a.x(res.SidecarExit)) {
			t.Errorf("%s: sidecar-alive %+v, want it to end at %.2fs (x %.1f)", path, sidecar, res.SidecarExit, a.x(res.SidecarExit))
		}
		if stop := byClass(elems, "app-stop"); len(stop) != 1 || !near(attrF(t, stop[0], "x1"), a.x(res.AppStopS)) {
			t.Errorf("%s: app-stop marker %+v, want one at x %.1f", path, stop, a.x(res.AppStopS))
		}
		if !texts[stopCause(res)] {
			t.Errorf("%s: no label %q for the app's stop", path, stopCause(res))
		}
		if want := "meshdrain returned (quiet): SIGTERM to the app at 8.45s"; i == 7 && !texts[want] {
			t.Errorf("%s: no label %q", path, want)
		}
		// meshdrain saw Envoy killed under it and exited 5: the kubelet's FailedPreStopHook,
		// marked where the hook ended and said in words; no other row's hook failed.
		failedHook := byClass(elems, "prestop-failed")
		if i == 3 {
			want := "preStop failed (meshdrain exit 5, sidecar-gone-busy): SIGTERM to the app at 5.18s"
			if len(failedHook) != 1 || !texts[want] || !texts["preStop failed (exit 5)"] {
				t.Errorf("%s: preStop failed marks %v, want one, the label %q and a legend entry", path, failedHook, want)
			}
		} else if len(failedHook) != 0 {
			t.Errorf("%s: a preStop failed mark for a hook that returned", path)
		}
		if regime := byClass(elems, "drain-regime"); len(regime) != 1 || regime[0].text != res.DrainRegime || !strings.HasPrefix(res.DrainRegime, "drain regime (a)") {
			t.Errorf("%s: drain regime %v, want %q", path, regime, res.DrainRegime)
		}

		// Failures: marked, in the colour of their kind, where they happened; none where none.
		failures := byClass(elems, "failure")
		if res.ClientFailures == 0 {
			if len(failures) != 0 {
				t.Errorf("%s: failure markers for a row without failures", path)
			}
		} else {
			if len(failures) != 2 {
				t.Fatalf("%s: %d failure markers, want the first and the last failure", path, len(failures))
			}
			if got := failures[0].attrs["stroke"]; got != failureColour(failCut) {
				t.Errorf("%s: failure marker colour %s, want %s (503 UC)", path, got, failureColour(failCut))
			}
			if !near(attrF(t, failures[0], "x1"), a.x(*res.FirstFailureS)) || !near(attrF(t, failures[1], "x1"), a.x(*res.LastFailureS)) {
				t.Errorf("%s: failure markers at x %s and %s, want %.1f and %.1f", path, failures[0].attrs["x1"], failures[1].attrs["x1"], a.x(*res.FirstFailureS), a.x(*res.LastFailureS))
			}
		}
		if got := len(byClass(elems, "sidecar-5xx")); (got == 1) != (res.Sidecar5xx > 0) {
			t.Errorf("%s: %d sidecar-5xx bars for %d sidecar 5xx", path, got, res.Sidecar5xx)
		}
	}

	page, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<img src="01-none-istio-default.svg"`, `<img src="08-meshdrain-recommended.svg"`, "meshdrain 6.56s sooner"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
}

// TestSVGEscapes: names and labels are escaped, so the file stays XML whatever they hold.
func TestSVGEscapes(t *testing.T) {
	r := Report{Results: []Result{{Strategy: "sleep:5s", Sidecar: `a<b>&"c"`, ClientFailures: 2, AppStopS: 5, SidecarExit: 6,
		LastClientLagS: 7, PodGoneS: 6, FirstFailureS: ptr(6), LastFailureS: ptr(6.5),
		FailuresByKind: map[string]int{failCut: 1, failTimeout: 1}}}}
	var b bytes.Buffer
	if err := r.writeSVG(&b, r.Results[0], r.axis()); err != nil {
		t.Fatal(err)
	}
	elems := decodeSVG(t, b.Bytes())
	found := false
	for _, e := range elems {
		found = found || e.name == "text" && strings.Contains(e.text, `sidecar a<b>&"c"`)
	}
	if !found {
		t.Errorf("the sidecar's name did not survive escaping:\n%s", b.String())
	}
	// Two kinds: the markers cannot take one kind's colour; the legend shows both.
	if f := byClass(elems, "failure"); len(f) != 2 || f[0].attrs["stroke"] != colourMixed {
		t.Errorf("failure markers %+v, want two in the mixed colour", f)
	}
	if name := svgFileName(0, r.Results[0]); name != "01-sleep-5s-a-b---c-.svg" {
		t.Errorf("file name %q", name)
	}
}

func TestWrapWords(t *testing.T) {
	got := wrapWords("meshdrain lost 14, app stopped at 8.45s; best", 21)
	want := []string{"meshdrain lost 14,", "app stopped at 8.45s;", "best"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("wrapWords = %q, want %q", got, want)
	}
}

// textBoxOf is the room a decoded label takes, estimated as the picture lays labels out
// (charWidth a character), nil for a text in another font size (the title).
func textBoxOf(t *testing.T, e svgElement) *box {
	t.Helper()
	if e.name != "text" || e.attrs["font-size"] != "" {
		return nil
	}
	x, y := attrF(t, e, "x"), attrF(t, e, "y")
	width := float64(len(e.text)) * charWidth
	switch e.attrs["text-anchor"] {
	case "end":
		x -= width
	case "middle":
		x -= width / 2
	}
	b := textBox(x, x+width, y)
	return &b
}

// marksOf are the boxes of a decoded picture's marks that no label may cross: the failure
// lines and bar, a failed preStop's mark, the lines of the deletion and of the app's stop.
// The lag bound's line is not one: it is drawn under the labels, as a grid line is.
func marksOf(t *testing.T, elems []svgElement) (failures, others []box) {
	t.Helper()
	vertical := func(e svgElement) box {
		x, half := attrF(t, e, "x1"), attrF(t, e, "stroke-width")/2
		return box{x - half, attrF(t, e, "y1"), x + half, attrF(t, e, "y2")}
	}
	for _, e := range byClass(elems, "failure") {
		failures = append(failures, vertical(e))
	}
	for _, e := range byClass(elems, "failures") {
		x, y := attrF(t, e, "x"), attrF(t, e, "y")
		failures = append(failures, box{x, y, x + attrF(t, e, "width"), y + attrF(t, e, "height")})
	}
	for _, e := range append(byClass(elems, "deletion"), byClass(elems, "app-stop")...) {
		others = append(others, vertical(e))
	}
	for _, e := range byClass(elems, "prestop-failed") {
		var x0, y0, x1, y1, x2, y2, x3, y3 float64
		if _, err := fmt.Sscanf(e.attrs["d"], "M%f %fL%f %fL%f %fL%f %fZ", &x0, &y0, &x1, &y1, &x2, &y2, &x3, &y3); err != nil {
			t.Fatalf("prestop-failed mark %q: %v", e.attrs["d"], err)
		}
		others = append(others, box{x3, y0, x1, y2})
	}
	return failures, others
}

// TestSVGLabelsClearOfFailureMarks: no failure line or bar runs through a label, wherever the
// failures fall: right after the sidecar's death (where its "SIGKILLed" label starts), across
// the clients' and the app's labels, at the right edge; nor does the line of the deletion, of
// the app's stop or a failed preStop's mark; and no two labels overlap.
func TestSVGLabelsClearOfFailureMarks(t *testing.T) {
	r := demoReport()
	base := r.Results[1] // sleep:5s, istio-default: Envoy killed at 5 s
	with := func(first, last float64, edit func(*Result)) Result {
		res := base
		res.FirstFailureS, res.LastFailureS = ptr(first), ptr(last)
		if edit != nil {
			edit(&res)
		}
		return res
	}
	r.Results = append(r.Results,
		with(5.02, 5.6, nil), // the cut requests seen just after Envoy's kill
		with(5.3, 9, nil),
		with(7.7, 8.2, nil), // across the clients' label
		with(5.4, 5.5, func(res *Result) { res.AppStopS, res.AppExitS = 5, 5.2 }), // across the app's
		with(50, 52.5, func(res *Result) { res.LastClientLagS, res.SidecarExit, res.AppExitS = 51, 51.5, 52 }),
		with(0.5, 4, func(res *Result) { res.Sidecar5xx, res.SidecarUF, res.AppStopS = 40, 40, 0 }),
		with(29, 30, func(res *Result) { // a hook the grace period ended: the app killed with it
			res.PreStopError, res.AppStopS, res.AppExitS, res.KilledDetail = errPreStopKilled.Error(), 30, 30, []string{"app by kubelet at 30.0s"}
		}),
	)
	a := r.axis()
	for i, res := range r.Results {
		var b bytes.Buffer
		if err := r.writeSVG(&b, res, a); err != nil {
			t.Fatal(err)
		}
		labelsClear(t, fmt.Sprintf("row %d (%s)", i, r.svgSummary(res)), res, decodeSVG(t, b.Bytes()))
	}
}

// labelsClear checks a decoded picture of res: no mark runs through a label, no label
// leaves the picture, and no two labels overlap.
func labelsClear(t *testing.T, row string, res Result, elems []svgElement) {
	t.Helper()
	failures, others := marksOf(t, elems)
	if res.ClientFailures > 0 && len(failures) != 3 {
		t.Fatalf("%s: %d failure marks, want two lines and a bar", row, len(failures))
	}
	marks := append(failures, others...)
	var labels []svgElement
	for _, e := range elems {
		if tb := textBoxOf(t, e); tb != nil {
			if tb.x0 < 0 || tb.x1 > svgWidth {
				t.Errorf("%s: label %q (x %.1f-%.1f) leaves the picture", row, e.text, tb.x0, tb.x1)
			}
			for _, m := range marks {
				if tb.overlaps(m) {
					t.Errorf("%s: a mark at x %.1f-%.1f runs through %q (x %.1f-%.1f)", row, m.x0, m.x1, e.text, tb.x0, tb.x1)
				}
			}
			labels = append(labels, e)
		}
	}
	for j, e := range labels {
		for _, o := range labels[j+1:] {
			if textBoxOf(t, e).overlaps(*textBoxOf(t, o)) {
				t.Errorf("%s: labels %q and %q overlap", row, e.text, o.text)
			}
		}
	}
}

// meshlessReport is a `simulate --mesh none` report: no preStop loses requests; meshdrain,
// run with the plan's lag bound 7.4s, waits to 16.9s (keep-alive clients send until the app
// closes them); a hook that returns just before the bound.
func meshlessReport() Report {
	row := func(strategy string, stop float64) Result {
		return Result{Strategy: strategy, Sidecar: "no-sidecar", Requests: 1988, AppStopS: stop, AppExitS: stop + 1, SidecarExit: stop + 1,
			PodGoneS: stop + 1, LastClientLagS: 5.9, GracePeriodS: 45, DrainRegime: drainRegime(SidecarSpec{Mesh: MeshNone}, Strategy{})}
	}
	none := row("none", 0)
	none.ClientFailures, none.FailuresByKind = 1150, map[string]int{failConnRefused: 595, failConnReset: 555}
	none.FirstFailureS, none.LastFailureS = ptr(0.01), ptr(5.8)
	md := row("meshdrain", 16.9)
	md.LagBoundS = 7.4
	md.Meshdrain = &MeshdrainEvent{Reason: "quiet", ElapsedPodS: 16.9}
	early := md
	early.AppStopS, early.AppExitS, early.PodGoneS = 7.2, 8.2, 8.2
	return Report{
		Scenario: ScenarioSummary{Mesh: MeshNone, Traffic: "mixed", QPS: 400, Clients: 32, Threads: 200, P99: "450ms", AppShutdown: "graceful",
			EDSLag: "p50=1s,p99=5s", LastClientLagS: 5.9, RouteTimeout: "0s", GracePeriod: "45s", TimeScale: 0.25, Seed: 1},
		Results: []Result{none, row("sleep:10s", 10.01), md, early},
	}
}

// TestMeshlessSVG: a pod without a sidecar is drawn without a sidecar's lanes, words or
// legend; a meshdrain row marks the lag bound it ran with, a line across the lanes with its
// label, before a wait that ends past it; rows without one have no such line; no label is
// crossed by a mark, the lag bound's included.
func TestMeshlessSVG(t *testing.T) {
	r := meshlessReport()
	a := r.axis()
	for i, res := range r.Results {
		var b bytes.Buffer
		if err := r.writeSVG(&b, res, a); err != nil {
			t.Fatal(err)
		}
		svg := b.String()
		for _, sidecar := range []string{"sidecar 5xx", "istio-proxy", "sidecar alive", "sidecar no-sidecar", "sidecar-alive", "sidecar-5xx"} {
			if strings.Contains(svg, sidecar) {
				t.Errorf("row %d (%s): the picture of a pod without a sidecar has %q", i, res.Strategy, sidecar)
			}
		}
		elems := decodeSVG(t, b.Bytes())
		texts := map[string]bool{}
		firstLabel := -1
		for j, e := range elems {
			if e.name == "text" {
				texts[e.text] = true
				if e.text == laneClients && firstLabel < 0 {
					firstLabel = j
				}
			}
		}
		if texts["no sidecar"] {
			t.Errorf("row %d (%s): a lane for the sidecar the pod has not", i, res.Strategy)
		}
		for _, lane := range []string{laneClients, laneApp, laneFailures} {
			if !texts[lane] {
				t.Errorf("row %d: no %q lane", i, lane)
			}
		}
		if !texts[res.Strategy+", no sidecar"] {
			t.Errorf("row %d: no title %q", i, res.Strategy+", no sidecar")
		}
		bound := byClass(elems, "lag-bound")
		if res.LagBoundS == 0 {
			if len(bound) != 0 || strings.Contains(svg, "lag bound") {
				t.Errorf("row %d (%s): a lag bound drawn for a hook that ran none", i, res.Strategy)
			}
		} else {
			label := fmt.Sprintf("lag bound %.2fs: past it, a quiet window ends the wait", res.LagBoundS)
			if len(bound) != 1 || attrF(t, bound[0], "x1") != attrF(t, bound[0], "x2") || math.Abs(attrF(t, bound[0], "x1")-a.x(res.LagBoundS)) > 0.11 {
				t.Fatalf("row %d: lag-bound lines %+v, want one vertical at x %.1f (%.2fs)", i, bound, a.x(res.LagBoundS), res.LagBoundS)
			}
			if !texts[label] || !texts["lag bound (--eds-lag-bound)"] {
				t.Errorf("row %d: no label %q, or no legend entry", i, label)
			}
			if slices.IndexFunc(elems, func(e svgElement) bool { return e.attrs["class"] == "lag-bound" }) > firstLabel {
				t.Errorf("row %d: the lag bound is drawn over the lanes' labels, not under them", i)
			}
			if stop := byClass(elems, "app-stop"); res.AppStopS > res.LagBoundS && (len(stop) != 1 || attrF(t, stop[0], "x1") <= attrF(t, bound[0], "x1")) {
				t.Errorf("row %d: the app's stop at %.2fs is not drawn after the lag bound %.2fs", i, res.AppStopS, res.LagBoundS)
			}
		}
		labelsClear(t, fmt.Sprintf("row %d (%s)", i, res.Strategy), res, elems)
	}
}
