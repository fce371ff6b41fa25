package plan

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
)

// Annotation names and values the plan sets on the pod template.
const (
	// StatsInclusionAnnotation makes Istio emit the inbound stats meshdrain reads: by default
	// Istio emits none of cluster.inbound|…, http.inbound_… or listener.0.0.0.0_15006.….
	StatsInclusionAnnotation = "sidecar.istio.io/statsInclusionPrefixes"
	StatsInclusionPrefixes   = "cluster.inbound|,http.inbound_,listener.0.0.0.0_15006"
	// NativeSidecarAnnotation asks istiod to inject istio-proxy as a native sidecar for this
	// pod (alpha, newer Istio releases); ENABLE_NATIVE_SIDECARS=true on istiod does it for
	// every pod. Older releases ignore it.
	NativeSidecarAnnotation = "sidecar.istio.io/nativeSidecar"
	// ProxyConfigAnnotation overrides the mesh's proxyConfig for one pod (read at injection,
	// so it takes effect on the next pod created).
	ProxyConfigAnnotation = "proxy.istio.io/config"
	// LogFile is where the preStop hook writes: the app's PID 1 stdout, so meshdrain's log
	// shows up in `kubectl logs` (the kubelet discards a hook's own output unless it fails).
	LogFile = "/proc/1/fd/1"
)

// Annotation is one pod-template annotation, kept in a slice so the output order is stable.
type Annotation struct{ Key, Value string }

// Annotations are the pod-template annotations the plan needs.
func (p Plan) Annotations() []Annotation {
	anns := p.mesh().annotations(p)
	if l := p.Input.LagFrom; l != nil {
		anns = append(anns, Annotation{LagFromAnnotation, l.annotation(p.Input.EDSLag)})
	}
	return anns
}

// PrestopArgs are the arguments of `meshdrain prestop` that realise the plan. --deadline is
// left out on purpose: prestop derives it as grace − app-drain − 1s, which is the plan's
// Deadline, and it then follows the grace period if someone changes it. For Linkerd the
// hook is told the mesh and the proxy's admin port: prestop's own defaults are Envoy's.
func (p Plan) PrestopArgs() []string {
	args := append([]string{"prestop"}, p.mesh().prestopArgs(p)...)
	args = append(args,
		"--grace-period="+fmtD(p.GracePeriod),
		"--app-drain="+fmtD(p.AppDrain),
		"--quiet="+fmtD(p.Quiet),
	)
	if p.Input.MinWait != drain.DefaultMinWait {
		args = append(args, "--min-wait="+fmtD(p.Input.MinWait))
	}
	if p.LastClientLag > 0 {
		// How late the last client learns: past it, prestop needs only --quiet of silence
		// (never slower than the sleep the same knowledge would give, plus one window).
		args = append(args, "--eds-lag-bound="+fmtD(p.LastClientLag))
	}
	if l := p.Input.LagFrom; l != nil {
		// The fleet's lag and the risk accepted: the hook's figure guards its stop.
		args = append(args, "--lag-dist="+l.Dist().String(), "--risk="+l.RiskFlag())
	}
	if p.Input.ClientPeriod > 0 {
		// The schedule replaces the rule's guess from the pauses it sees (--quiet above
		// covers it).
		args = append(args, "--client-period="+fmtD(p.Input.ClientPeriod))
	}
	if p.Input.RPSPerClient > 0 {
		// One client's rate: a client that shows no pool is judged by its own silence.
		args = append(args, "--rps-per-client="+strconv.FormatFloat(p.Input.RPSPerClient, 'g', -1, 64))
	}
	if p.Poll != DefaultPoll {
		args = append(args, "--poll="+fmtD(p.Poll))
	}
	if p.FallbackWait > 0 {
		// The sleep it replaces: a broken configuration holds the pod as it did.
		args = append(args, "--fallback-wait="+fmtD(p.FallbackWait))
	}
	return append(args, "--log-file="+LogFile)
}

// DrainAtEnd is prestop's --drain-at value of regime (b): Envoy's inbound drain at the decision.
const DrainAtEnd = "end"

// ProxyContainerName is the container Istio injects, and the name of the override that Istio's
// injector merges into it (pkg/kube/inject/webhook.go, reapplyOverwrittenContainers).
const ProxyContainerName = "istio-proxy"

// ProxyImageAuto is the image of the override: the injector keeps its own (AutoImage).
const ProxyImageAuto = "auto"

// HoldArgs are the arguments of `meshdrain hold`, istio-proxy's preStop in regime (b); nil in
// regime (a). hold ends by the app hook's deadline plus its drain, so it takes prestop's
// --grace-period and --app-drain (its --deadline, like prestop's, is derived from them).
func (p Plan) HoldArgs() []string {
	if !p.defers() {
		return nil
	}
	return []string{"hold", "--grace-period=" + fmtD(p.GracePeriod), "--app-drain=" + fmtD(p.AppDrain), "--log-file=" + LogFile}
}

// WriteText prints the plan for a person: the timeline, the settings, the arithmetic and
// the warnings.
func WriteText(w io.Writer, p Plan) error {
	ew := &errWriter{w: w}
	ew.printf("Termination timeline (t0 = the pod is deleted; sidecar: %s)\n\n", p.sidecarName())
	writeSteps(ew, p.Steps)

	ew.printf("\nRecommended settings\n\n")
	ew.printf("  terminationGracePeriodSeconds: %d", int(p.GracePeriod/time.Second))
	if p.GracePeriod > p.SufficientGracePeriod {
		ew.printf(" (kept: the pod's own; %s suffices, --lower-grace-period sets it)", fmtD(p.SufficientGracePeriod))
	}
	ew.printf("\n")
	ew.printf("  app container preStop:         /meshdrain/meshdrain %s\n", strings.Join(p.PrestopArgs(), " "))
	ew.printf("                                 (its --deadline is then %s)\n", fmtD(p.Deadline))
	ew.printf("  app graceful shutdown:         finish in-flight requests within %s of SIGTERM\n", fmtD(p.AppDrain))
	if p.defers() {
		ew.printf("  istio-proxy preStop:           /meshdrain/meshdrain %s\n", strings.Join(p.HoldArgs(), " "))
		ew.printf("                                 (a container %s in the pod spec, image: %s, mounting /meshdrain read-only: Istio's\n", ProxyContainerName, ProxyImageAuto)
		ew.printf("                                 injector merges it into the proxy it injects, in initContainers for native sidecars)\n")
	}
	p.mesh().writeSettings(ew, p)

	writeLag(ew, p)

	ew.printf("\nArithmetic\n\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	for _, l := range p.Arithmetic {
		fmt.Fprintf(tw, "  %s\t= %s\t%s\n", l.Name, fmtD(l.Value), l.Why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	notes := append([]string{usualRollout(p)}, p.Warnings...)
	ew.printf("\nNotes\n\n")
	for _, n := range notes {
		lines := wrap(n, textWidth-4)
		ew.printf("  - %s\n", lines[0])
		for _, l := range lines[1:] {
			ew.printf("    %s\n", l)
		}
	}
	return ew.err
}

// sidecarName names the proxy in the timeline's title.
func (p Plan) sidecarName() string { return p.mesh().name(p) }

// usualRollout says when meshdrain returns when nothing is late: the deadline is only a bound.
func usualRollout(p Plan) string {
	usual := p.usualFinish()
	return fmt.Sprintf("in the usual rollout meshdrain returns at about t0+%s, as soon as the clients have stopped, not at its deadline: "+
		"a generous --eds-lag lengthens only the worst case", fmtD(usual))
}

// textWidth is where the timeline's descriptions wrap, so the plan reads in a terminal and
// pastes into a README without horizontal scrolling.
const textWidth = 100

// writeSteps prints the timeline as three columns, the description wrapped under itself.
func writeSteps(w io.Writer, steps []Step) {
	var timeW, whoW int
	for _, s := range steps {
		timeW = max(timeW, utf8.RuneCountInString(stepTime(s)))
		whoW = max(whoW, utf8.RuneCountInString(s.Who))
	}
	indent := 2 + timeW + 2 + whoW + 2
	for _, s := range steps {
		lines := wrap(s.What, max(40, textWidth-indent))
		t := stepTime(s)
		fmt.Fprintf(w, "  %s%s  %s%s  %s\n", t, strings.Repeat(" ", timeW-utf8.RuneCountInString(t)),
			s.Who, strings.Repeat(" ", whoW-utf8.RuneCountInString(s.Who)), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%s%s\n", strings.Repeat(" ", indent), l)
		}
	}
}

// wrap splits text into lines of at most width runes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	var line strings.Builder
	for _, word := range strings.Fields(text) {
		if line.Len() > 0 && utf8.RuneCountInString(line.String())+1+utf8.RuneCountInString(word) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	return append(lines, line.String())
}

func stepTime(s Step) string {
	t := "t0"
	if s.At > 0 {
		t = "t0+" + fmtD(s.At)
	}
	if s.Until > 0 {
		t += " → " + fmtD(s.Until)
	}
	if s.Worst > 0 && s.Worst != s.At {
		t += " (≤ " + fmtD(s.Worst) + ")"
	}
	return t
}

// errWriter keeps the first write error so the printers stay readable.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) {
	fmt.Fprintf(e, format, args...)
}
