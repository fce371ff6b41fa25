package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"sort"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// costReport is what one poll costs.
type costReport struct {
	Stats             int     `json:"stats"`
	FilteredBytes     int     `json:"filtered_bytes"`
	UnfilteredBytes   int     `json:"unfiltered_bytes"`
	UsedBytes         int     `json:"used_bytes"`
	EmulatorFilterMS  float64 `json:"emulator_filtered_ms"`
	EmulatorUsedMS    float64 `json:"emulator_usedonly_ms"`
	EmulatorOldMS     float64 `json:"emulator_old_filter_ms"`
	EmulatorPilotMS   float64 `json:"emulator_pilot_agent_ms"`
	EmulatorUnfiltMS  float64 `json:"emulator_unfiltered_ms"`
	ParseNS           float64 `json:"parse_ns"`
	ParseAllocs       int64   `json:"parse_allocs"`
	ParseBytes        int64   `json:"parse_bytes"`
	ExpfmtAllocs      int64   `json:"expfmt_allocs"`
	WatchNS           float64 `json:"watch_ns"`
	WatchAllocs       int64   `json:"watch_allocs"`
	WatchBytes        int64   `json:"watch_bytes"`
	PrestopCPUPerPoll float64 `json:"prestop_cpu_per_poll_ms"`
	PrestopPolls      int     `json:"prestop_polls"`
	PrestopMaxRSSKB   int64   `json:"prestop_max_rss_kb"`
	BinaryBytes       int64   `json:"binary_bytes"`
}

// oldFilter is the filter meshdrain sent before issue 9, for comparison: an ^ per alternative
// and an unanchored completions branch, which a regex engine without RE2's DFA (the
// emulator's Go regexp) tries at every position of every name.
const oldFilter = `(^http\.inbound_.*_[0-9]+;?\.(downstream_rq_total|downstream_rq_active|downstream_cx_active)$)|` +
	`(^cluster\.inbound\|[0-9]+\|.*\.(upstream_rq_total|upstream_rq_active|upstream_cx_active)$)|` +
	`(^listener\.[0-9a-fA-F._:\[\]]+_15006\.(downstream_cx_total|downstream_cx_active)$)|(^server\.state$)`

// pollQuery is an admin query whose cost in the emulator's CPU is measured, perRound of it
// at a time. /proc counts whole clock ticks (10 ms), so a round of the cheap polls is 100 of
// them: a tick is then 0.1 ms of a poll.
type pollQuery struct {
	path     string
	perRound int
}

// The queries compared: meshdrain's complete read and watch poll, pilot-agent's own poll,
// meshdrain's previous filter and the unfiltered dump.
var (
	completeQuery   = pollQuery{"/stats/prometheus?filter=" + url.QueryEscape(envoy.StatsFilter(mesh.Selector{})), 100}
	watchQuery      = pollQuery{"/stats/prometheus?usedonly&filter=" + url.QueryEscape(envoy.StatsFilter(mesh.Selector{})), 100}
	pilotAgentQuery = pollQuery{"/stats?usedonly&filter=" + url.QueryEscape("downstream_cx_active$"), 100}
	oldFilterQuery  = pollQuery{"/stats/prometheus?filter=" + url.QueryEscape(oldFilter), 5}
	dumpQuery       = pollQuery{"/stats/prometheus", 5}
)

// measureCosts measures, against one emulator, what one poll costs: its bytes, the emulator's
// CPU, meshdrain's own CPU in-process and in the prestop process, and the binary's size.
func measureCosts(ctx context.Context, bin, simBin string) (*costReport, error) {
	emu, err := startEmulator(ctx, simBin)
	if err != nil {
		return nil, err
	}
	defer emu.stop()
	emu.useInbounds()

	c := &costReport{}
	a, err := fetchAnswers(emu)
	if err != nil {
		return nil, err
	}
	c.FilteredBytes, c.UsedBytes, c.UnfilteredBytes, c.Stats = len(a.complete), len(a.usedOnly), len(a.dump), a.stats

	cpu, err := emulatorCPUPerPoll(emu, []pollQuery{completeQuery, watchQuery, pilotAgentQuery, oldFilterQuery, dumpQuery}, 5)
	if err != nil {
		return nil, err
	}
	c.EmulatorFilterMS, c.EmulatorUsedMS, c.EmulatorPilotMS = cpu[completeQuery], cpu[watchQuery], cpu[pilotAgentQuery]
	c.EmulatorOldMS, c.EmulatorUnfiltMS = cpu[oldFilterQuery], cpu[dumpQuery]

	parse := completeParseCost(a.complete)
	c.ParseNS, c.ParseAllocs, c.ParseBytes = float64(parse.NsPerOp()), parse.AllocsPerOp(), parse.AllocedBytesPerOp()
	watch, err := watchParseCost(a.complete, a.usedOnly)
	if err != nil {
		return nil, err
	}
	c.WatchNS, c.WatchAllocs, c.WatchBytes = float64(watch.NsPerOp()), watch.AllocsPerOp(), watch.AllocedBytesPerOp()
	c.ExpfmtAllocs = expfmtAllocs(a.complete)

	if c.PrestopCPUPerPoll, c.PrestopPolls, c.PrestopMaxRSSKB, err = prestopCost(ctx, bin, emu.admin); err != nil {
		return nil, err
	}
	if st, err := os.Stat(bin); err == nil {
		c.BinaryBytes = st.Size()
	}
	return c, nil
}

// answers are the emulator's answers whose size is reported and which meshdrain's own
// parse is measured on.
type answers struct {
	complete, usedOnly, dump []byte
	stats                    int // how many stats the emulated Envoy holds
}

func fetchAnswers(emu *emulator) (answers, error) {
	var a answers
	var err error
	if a.complete, err = emu.get(completeQuery.path); err != nil {
		return a, err
	}
	if a.dump, err = emu.get(dumpQuery.path); err != nil {
		return a, err
	}
	if a.usedOnly, err = emu.get(watchQuery.path); err != nil {
		return a, err
	}
	// /stats has one stat a line; the Prometheus dump's count, less its TYPE lines, is the
	// fallback.
	a.stats = bytes.Count(a.dump, []byte("\n")) - bytes.Count(a.dump, []byte("# TYPE"))
	if text, err := emu.get("/stats"); err == nil {
		a.stats = bytes.Count(text, []byte("\n"))
	}
	return a, nil
}

// emulatorCPUPerPoll is the emulator's own CPU per poll of each query, in milliseconds: the
// median over rounds that interleave the queries, because the machine is shared and noisy,
// so the queries are measured side by side and compared as ratios.
func emulatorCPUPerPoll(emu *emulator, queries []pollQuery, rounds int) (map[pollQuery]float64, error) {
	samples := map[pollQuery][]float64{}
	for range rounds {
		for _, q := range queries {
			ms, err := emulatorCPUOfRound(emu, q)
			if err != nil {
				return nil, err
			}
			samples[q] = append(samples[q], ms)
		}
	}
	perPoll := map[pollQuery]float64{}
	for q, s := range samples {
		perPoll[q] = median(s)
	}
	return perPoll, nil
}

// emulatorCPUOfRound is the emulator's CPU per poll over one round of q.
func emulatorCPUOfRound(emu *emulator, q pollQuery) (float64, error) {
	before, err := emu.cpuMS()
	if err != nil {
		return 0, err
	}
	for range q.perRound {
		if _, err := emu.get(q.path); err != nil {
			return 0, err
		}
	}
	after, err := emu.cpuMS()
	return float64(after-before) / float64(q.perRound), err
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// completeParseCost is meshdrain's own CPU per complete poll: the real response parsed,
// normalised and read.
func completeParseCost(complete []byte) testing.BenchmarkResult {
	return testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			snap, err := envoy.Parse(bytes.NewReader(complete), mesh.Selector{})
			if err != nil {
				b.Fatal(err)
			}
			_ = snap.Read()
		}
	})
}

// watchParseCost is meshdrain's own CPU per watch poll: the usedonly answer parsed,
// completed with the picture (the complete answer), normalised and read.
func watchParseCost(complete, usedOnly []byte) (testing.BenchmarkResult, error) {
	picture, err := envoy.ParseFamilies(bytes.NewReader(complete))
	if err != nil {
		return testing.BenchmarkResult{}, err
	}
	return testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			answer, err := envoy.ParseFamilies(bytes.NewReader(usedOnly))
			if err != nil {
				b.Fatal(err)
			}
			merged, ok := envoy.CompleteWith(picture, answer)
			if !ok {
				b.Fatal("the usedonly answer does not complete the complete one")
			}
			_ = envoy.Normalise(merged, mesh.Selector{}).Read()
		}
	}), nil
}

// expfmtAllocs is expfmt's own allocations for the payload, with a reused parser: the floor of
// a poll's allocations as long as expfmt parses the Prometheus text.
func expfmtAllocs(payload []byte) int64 {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parser.TextToMetricFamilies(bytes.NewReader(payload)); err != nil {
				b.Fatal(err)
			}
		}
	}).AllocsPerOp()
}
