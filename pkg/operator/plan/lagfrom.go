package plan

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/operator/lag"
)

// LagFromAnnotation is the pod-template annotation a plan from --lag-from writes: a one-line
// summary of the evidence and the fit, so that the numbers in the preStop can be traced back
// to what they were learnt from. A re-plan without --lag-from leaves it as it is.
const LagFromAnnotation = "meshdrain.io/lag-from"

// DefaultRisk is plan's and prestop's --risk: the probability the operator accepts that one
// drain's stop comes before some client has learnt (issue 39).
const DefaultRisk = risk.DefaultLevel

// LagFrom is the lag the plan learnt from the fleet (plan --lag-from): the sources read, the
// fitted distribution, and the risk the operator accepts. With it, the plan's EDSLag is the
// fit's Quantile(1 − Risk), and the hook gets the distribution (--lag-dist) and the risk
// (--risk), whose figure replaces --min-wait as the guard against a client that has not
// shown itself yet.
type LagFrom struct {
	Sources []lag.Source
	Fit     lag.Fit
	Risk    float64
}

// NewLagFrom fits the sources for risk.
func NewLagFrom(sources []lag.Source, riskP float64) (*LagFrom, error) {
	if err := CheckRisk(riskP); err != nil {
		return nil, err
	}
	fit, err := lag.NewFit(sources, 1-riskP)
	if err != nil {
		return nil, fmt.Errorf("--lag-from %s: %w", strings.Join(SourceNames(sources), " "), err)
	}
	return &LagFrom{Sources: sources, Fit: fit, Risk: riskP}, nil
}

// CheckRisk refuses a --risk prestop would refuse.
func CheckRisk(p float64) error {
	if err := risk.CheckLevel(p); err != nil {
		return fmt.Errorf("--risk %w: the probability one drain stops before its last client has learnt", err)
	}
	return nil
}

// SourceNames are the sources' names, each once, in the order given.
func SourceNames(sources []lag.Source) []string {
	var names []string
	for _, s := range sources {
		if len(names) == 0 || names[len(names)-1] != s.Name {
			names = append(names, s.Name)
		}
	}
	return names
}

// Dist is the distribution the hook gets as --lag-dist.
func (l *LagFrom) Dist() risk.Distribution { return l.Fit.Dist }

// RiskFlag is --risk's value as the hook gets it.
func (l *LagFrom) RiskFlag() string { return strconv.FormatFloat(l.Risk, 'g', -1, 64) }

// quantileLag is the fitted lag one client exceeds with probability Risk, and the lag the plan
// sizes on: it rounded up to 100ms, as plan rounds every derived lag.
func (l *LagFrom) quantileLag() (exact, edsLag time.Duration) {
	exact = l.Fit.Dist.Quantile(1 - l.Risk)
	return exact, roundUp(exact, 100*time.Millisecond)
}

// inputProblems are the inputs that do not go with --lag-from.
func (l *LagFrom) inputProblems(in Input) []error {
	var errs []error
	if err := CheckRisk(l.Risk); err != nil {
		errs = append(errs, err)
	}
	if in.Clients > 0 || in.EDSLagMedian > 0 {
		errs = append(errs, errors.New("--clients goes with --eds-lag p50=D,p99=D, not with --lag-from: with a lag distribution the hook counts the clients it sees"))
	}
	if _, edsLag := l.quantileLag(); edsLag <= 0 {
		errs = append(errs, fmt.Errorf("--lag-from: the fitted lag at %s is 0 (%s): the evidence shows no client that learnt late; give --eds-lag instead",
			quantileName(1-l.Risk), l.Fit.Dist))
	}
	return errs
}

// lagArithmetic are the lines a plan from --lag-from adds: the lag it is sized on, the bound
// and the minimum wait that follow.
func (p Plan) lagArithmetic() []Line {
	l := p.Input.LagFrom
	exact, edsLag := l.quantileLag()
	lines := []Line{
		{"eds-lag (from --lag-from)", edsLag, fmt.Sprintf("the fitted lag one client exceeds with probability --risk %s: Quantile(1 − %s) = %s of %s = %s, rounded up to 100ms",
			l.RiskFlag(), l.RiskFlag(), quantileName(1-l.Risk), l.Fit.Dist, fmtD(exact))},
		{"meshdrain --eds-lag-bound", p.LastClientLag, fmt.Sprintf("eds-lag %s, as plan writes it from --eds-lag", fmtD(edsLag))},
	}
	if p.Input.MinWait == 0 {
		lines = append(lines, Line{"meshdrain --min-wait", 0, fmt.Sprintf("0: the hook gets the distribution (--lag-dist) and --risk %s, and stops only once the figure (the probability some client still routes here) is ≤ %s: the figure guards where a fixed minimum wait did; --min-wait D still sets a floor",
			l.RiskFlag(), l.RiskFlag())})
	}
	return lines
}

// lagAttention are the fit's warnings, which plan says on stderr whatever -o is: the settings
// are written all the same.
func (l *LagFrom) lagAttention() []string {
	var out []string
	for _, w := range l.Fit.Warnings {
		out = append(out, "--lag-from: "+w)
	}
	return out
}

// annotation is the one-line summary the pod template keeps (LagFromAnnotation).
func (l *LagFrom) annotation(edsLag time.Duration) string {
	return fmt.Sprintf("from %s: %s; risk %s; lag-dist %s; eds-lag %s",
		strings.Join(SourceNames(l.Sources), ", "), l.Fit.Summary, l.RiskFlag(), l.Fit.Dist, fmtD(edsLag))
}

// lagGuards says that the hook's risk figure guards its stop: the plan writes a distribution,
// or the workload's preStop already has one that a re-plan keeps. A --min-wait of 0 is then
// what the plan means, not a slip.
func (in Input) lagGuards() bool { return in.LagFrom != nil || in.KeepsLagDist }

// sourceLine says what one source gave, for the text and the JSON.
func sourceLine(s lag.Source) string {
	if s.Histogram != nil {
		h := s.Histogram
		return fmt.Sprintf("%s: %g observations in %d buckets, %d series on %d nodes", s.Kind, h.Count(), len(h.Buckets), len(h.SeriesCounts), len(h.Nodes()))
	}
	return fmt.Sprintf("%s: %d drains (%d censored), %d records skipped (%d not meshdrain's, %d other meshdrain events, %d malformed)",
		s.Kind, len(s.Samples), s.Samples.Censored(), s.Skipped.Total(), s.Skipped.NotMeshdrain, s.Skipped.OtherEvents, s.Skipped.Malformed)
}

// writeLag prints the lag section of the text plan.
func writeLag(ew *errWriter, p Plan) {
	l := p.Input.LagFrom
	if l == nil {
		return
	}
	ew.printf("\nLag (--lag-from, --risk %s)\n\n", l.RiskFlag())
	for _, s := range l.Sources {
		ew.printf("  %s: %s\n", s.Name, sourceLine(s))
	}
	ew.printf("  evidence: %s\n", l.Fit.Summary)
	ew.printf("  fitted:\n")
	for _, pt := range l.Fit.Points {
		ew.printf("    %-6s %-8s %s\n", strconv.FormatFloat(pt.Q, 'g', -1, 64), fmtD(pt.At), pt.From)
	}
	ew.printf("  the hook gets --lag-dist=%s --risk=%s; the pod template, %s\n", l.Fit.Dist, l.RiskFlag(), LagFromAnnotation)
}

// quantileName is "p99.9" for 0.999.
func quantileName(q float64) string {
	return "p" + strings.TrimSuffix(strings.TrimRight(strconv.FormatFloat(q*100, 'f', 4, 64), "0"), ".")
}
