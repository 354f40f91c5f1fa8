package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// column is one figure of a table: its heading, metric name and format.
type column struct {
	head, metric, format string
}

// table prints the medians among ms as a Markdown table with the given columns.
func table(out io.Writer, title string, ms []measurement, cols []column) {
	rows := [][]string{{"variant"}, {"---"}}
	for _, c := range cols {
		rows[0] = append(rows[0], c.head)
		rows[1] = append(rows[1], "---:")
	}
	for _, m := range ms {
		if m.Kind != "median" {
			continue
		}
		r := []string{m.Variant}
		for _, c := range cols {
			r = append(r, cell(c.format, m.M, c.metric))
		}
		rows = append(rows, r)
	}
	fmt.Fprintf(out, "### %s\n\n", title)
	writeTable(out, rows)
	fmt.Fprintln(out)
}

// writeTable prints rows as a Markdown table with aligned columns: the first
// column left-aligned, the others right-aligned.
func writeTable(out io.Writer, rows [][]string) {
	width := map[int]int{}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				fmt.Fprintf(&b, "| %s%s ", c, pad)
			} else {
				fmt.Fprintf(&b, "| %s%s ", pad, c)
			}
		}
		fmt.Fprintln(out, b.String()+"|")
	}
}

func cell(format string, m metrics, name string) string {
	v, ok := m[name]
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// headlineContended prints, for every dlock variant and G of scenario b, its hand-overs per
// second against redsync with its default retry and against the best peer
// polling every millisecond, from the medians in meds.
func headlineContended(out io.Writer, meds []measurement) {
	byN := map[int]map[string]metrics{}
	var ns []int
	for _, m := range meds {
		if m.Scenario != "b" || m.Kind != "median" {
			continue
		}
		if byN[m.N] == nil {
			byN[m.N] = map[string]metrics{}
			ns = append(ns, m.N)
		}
		byN[m.N][m.Variant] = m.M
	}
	fmt.Fprintf(out, "### b. hand-overs per second, dlock against the peers (ratios of medians)\n\n")
	rows := [][]string{
		{"variant", "G", "handoffs/s", "× redsync default", "best peer at 1ms", "× best 1ms", "handoff %", "timed out", "Jain", "cmds/CS client"},
		{"---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"},
	}
	for _, n := range ns {
		ms := byN[n]
		best, bestName := math.NaN(), "-"
		for _, v := range variants {
			if m, ok := ms[v.name]; ok && v.peer && v.retry1ms && (math.IsNaN(best) || m["handoffs_per_s"] > best) {
				best, bestName = m["handoffs_per_s"], v.name
			}
		}
		rs := math.NaN()
		if m, ok := ms["redsync"]; ok {
			rs = m["handoffs_per_s"]
		}
		for _, v := range variants {
			m, ok := ms[v.name]
			if !ok || v.lib != "dlock" {
				continue
			}
			h := m["handoffs_per_s"]
			rows = append(rows, []string{v.name, fmt.Sprint(n), fmt.Sprintf("%.0f", h), fmtRatio(h, rs),
				strings.TrimSpace(bestName + " " + fmtNum(best)), fmtRatio(h, best), cell("%.1f", m, "handoff_pct"),
				cell("%.0f", m, "timeouts"), cell("%.2f", m, "jain"), cell("%.2f", m, "cmds_per_cs_client")})
		}
	}
	writeTable(out, rows)
	fmt.Fprintln(out)
}

func fmtRatio(a, b float64) string {
	r := ratio(a, b)
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f", r)
}

func fmtNum(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return fmt.Sprintf("(%.0f/s)", v)
}

// target is one of the bench's targets, checked against one invocation's runs.
type target struct {
	name  string  // what is measured
	value float64 // the figure (NaN when not measured)
	bound string  // the target, as text
	met   bool
}

// Target bounds.
const (
	minUncontendedRatio = 0.95 // a: cycles/s as a ratio to raw
	minVsRedsync        = 20   // b, fair lock: handoffs/s over redsync's default
	minVsBest1ms        = 2    // b, fair lock: handoffs/s over the best peer polling every 1ms
	minHandoffPct       = 90
	minJain             = 0.95
	maxWaitPerGCS       = 10 // b, fair lock: wait max over G × critical-section time
	maxCmdsPerCS        = 4  // lock commands per critical section, client side
	minVsBsm            = 1.0
	minVsRueidis        = 1.2
	maxServerCPUVsBsm   = 1.1 // Redis CPU per uncontended cycle
	maxAllocsPerCycle   = 25  // client allocations per uncontended cycle (dlock/ttl: no watchdog)
)

// targetGs are the goroutine counts of scenario b the fair-lock targets are
// checked at.
var targetGs = []int{16, 64}

// checkTargets evaluates the targets against the runs in ms. Ratios are the
// median over repetitions of the ratio within each repetition; zero targets
// (timeouts, lost updates, overlaps) count every run.
func checkTargets(ms []measurement) []target {
	runs := map[string]map[int]map[int]metrics{} // scenario+variant -> n -> rep
	var ns = map[string][]int{}
	for _, m := range ms {
		if m.Kind != "run" {
			continue
		}
		k := m.Scenario + " " + m.Variant
		if runs[k] == nil {
			runs[k] = map[int]map[int]metrics{}
		}
		if runs[k][m.N] == nil {
			runs[k][m.N] = map[int]metrics{}
			if !slices.Contains(ns[m.Scenario], m.N) {
				ns[m.Scenario] = append(ns[m.Scenario], m.N)
			}
		}
		runs[k][m.N][m.Rep] = m.M
	}
	get := func(scenario, variant string, n int) map[int]metrics { return runs[scenario+" "+variant][n] }
	// ratioMed is the median over repetitions of f(rep) for the reps of the variant.
	ratioMed := func(scenario, variant string, n int, f func(rep int, m metrics) float64) float64 {
		var xs []float64
		for rep, m := range get(scenario, variant, n) {
			if x := f(rep, m); !math.IsNaN(x) && !math.IsInf(x, 0) {
				xs = append(xs, x)
			}
		}
		return median(xs)
	}
	med := func(scenario, variant string, n int, metric string) float64 {
		return ratioMed(scenario, variant, n, func(_ int, m metrics) float64 { return m[metric] })
	}
	worst := func(scenario, variant string, n int, metric string) float64 {
		w := math.NaN()
		for _, m := range get(scenario, variant, n) {
			if v, ok := m[metric]; ok && (math.IsNaN(w) || v > w) {
				w = v
			}
		}
		return w
	}
	var ts []target
	add := func(name string, v float64, bound string, ok func(float64) bool) {
		ts = append(ts, target{name: name, value: v, bound: bound, met: !math.IsNaN(v) && ok(v)})
	}
	atLeast := func(b float64) func(float64) bool { return func(v float64) bool { return v >= b } }
	atMost := func(b float64) func(float64) bool { return func(v float64) bool { return v <= b } }

	// dlock over rueidis against rueidislock and against dlock over go-redis.
	for _, g := range ns["a"] {
		for _, peer := range []string{"rueidis", "dlock"} {
			base := get("a", peer, g)
			if base == nil || get("a", "dlock/rueidis", g) == nil {
				continue
			}
			add(fmt.Sprintf("a G=%d: dlock/rueidis cycles/s × %s", g, peer),
				ratioMed("a", "dlock/rueidis", g, func(rep int, m metrics) float64 { return ratio(m["cycles_per_s"], base[rep]["cycles_per_s"]) }),
				fmt.Sprintf("≥ %.2f", minVsRueidis), atLeast(minVsRueidis))
		}
	}
	for _, g := range ns["a"] {
		raw := get("a", "raw", g)
		for _, v := range []string{"dlock", "dlock/ttl"} {
			add(fmt.Sprintf("a G=%d: %s cycles/s × raw", g, v),
				ratioMed("a", v, g, func(rep int, m metrics) float64 { return ratio(m["cycles_per_s"], raw[rep]["cycles_per_s"]) }),
				fmt.Sprintf("≥ %.2f", minUncontendedRatio), atLeast(minUncontendedRatio))
			for _, p := range []struct {
				peer string
				min  float64
			}{{"bsm", minVsBsm}, {"rueidis", minVsRueidis}} {
				peer := get("a", p.peer, g)
				if peer == nil {
					continue
				}
				add(fmt.Sprintf("a G=%d: %s cycles/s × %s", g, v, p.peer),
					ratioMed("a", v, g, func(rep int, m metrics) float64 { return ratio(m["cycles_per_s"], peer[rep]["cycles_per_s"]) }),
					fmt.Sprintf("≥ %.2f", p.min), atLeast(p.min))
			}
			if bsm := get("a", "bsm", g); bsm != nil {
				add(fmt.Sprintf("a G=%d: %s server CPU/cycle × bsm", g, v),
					ratioMed("a", v, g, func(rep int, m metrics) float64 {
						return ratio(m["server_cpu_us_per_cycle"], bsm[rep]["server_cpu_us_per_cycle"])
					}),
					fmt.Sprintf("≤ %.2f", maxServerCPUVsBsm), atMost(maxServerCPUVsBsm))
			}
			add(fmt.Sprintf("a G=%d: %s client allocations/cycle", g, v), med("a", v, g, "allocs_per_cycle"),
				fmt.Sprintf("≤ %d", maxAllocsPerCycle), atMost(maxAllocsPerCycle))
		}
	}
	const fair = "dlock/fair"
	for _, g := range targetGs {
		if get("b", fair, g) == nil {
			continue
		}
		rs := get("b", "redsync", g)
		add(fmt.Sprintf("b G=%d: %s handoffs/s × redsync default", g, fair),
			ratioMed("b", fair, g, func(rep int, m metrics) float64 { return ratio(m["handoffs_per_s"], rs[rep]["handoffs_per_s"]) }),
			fmt.Sprintf("≥ %d", minVsRedsync), atLeast(minVsRedsync))
		add(fmt.Sprintf("b G=%d: %s handoffs/s × best peer at 1ms", g, fair),
			ratioMed("b", fair, g, func(rep int, m metrics) float64 {
				best := math.NaN()
				for _, v := range variants {
					if p, ok := get("b", v.name, g)[rep]; ok && v.peer && v.retry1ms && (math.IsNaN(best) || p["handoffs_per_s"] > best) {
						best = p["handoffs_per_s"]
					}
				}
				return ratio(m["handoffs_per_s"], best)
			}),
			fmt.Sprintf("≥ %d", minVsBest1ms), atLeast(minVsBest1ms))
		add(fmt.Sprintf("b G=%d: %s handoff %%", g, fair), med("b", fair, g, "handoff_pct"),
			fmt.Sprintf("≥ %d", minHandoffPct), atLeast(minHandoffPct))
		add(fmt.Sprintf("b G=%d: %s timed-out acquires (worst run)", g, fair), worst("b", fair, g, "timeouts"), "0", atMost(0))
		add(fmt.Sprintf("b G=%d: %s Jain index", g, fair), med("b", fair, g, "jain"),
			fmt.Sprintf("≥ %.2f", minJain), atLeast(minJain))
		add(fmt.Sprintf("b G=%d: %s wait max / (G × CS time) (worst run)", g, fair), worst("b", fair, g, "wait_max_per_g_cs"),
			fmt.Sprintf("≤ %d", maxWaitPerGCS), atMost(maxWaitPerGCS))
	}
	for _, v := range []string{"dlock", fair} {
		for _, g := range ns["b"] {
			add(fmt.Sprintf("b G=%d (%d waiting): %s lock cmds/CS, client", g, g-1, v), worst("b", v, g, "cmds_per_cs_client"),
				fmt.Sprintf("≤ %d", maxCmdsPerCS), atMost(maxCmdsPerCS))
		}
		for _, n := range ns["c1"] {
			add(fmt.Sprintf("c1 %d waiters: %s lock cmds/handoff, client", n, v), worst("c1", v, n, "cmds_per_handoff_client"),
				fmt.Sprintf("≤ %d", maxCmdsPerCS), atMost(maxCmdsPerCS))
		}
	}
	for _, v := range []string{"dlock", fair} {
		for _, n := range ns["c2"] {
			add(fmt.Sprintf("c2 %d keys with a waiter: %s subscription connections", n, v), worst("c2", v, n, "sub_conns"), "1", atMost(1))
		}
	}
	for _, f := range []string{"lost", "overlaps"} {
		total, seen := 0.0, false
		for _, m := range ms {
			if v, ok := m.M[f]; ok && m.Kind == "run" {
				total += v
				seen = true
			}
		}
		if !seen {
			continue // no scenario with a shared counter ran
		}
		add(fmt.Sprintf("%s, every run of every variant", map[string]string{"lost": "lost updates", "overlaps": "overlapping critical sections"}[f]),
			total, "0", atMost(0))
	}
	return ts
}

// tableTargets prints the targets.
func tableTargets(out io.Writer, ts []target) {
	fmt.Fprintf(out, "### Targets (ratios: median over repetitions of the ratio within each; worst run where marked)\n\n")
	rows := [][]string{{"target", "measured", "wanted", "met"}, {"---", "---:", "---:", "---"}}
	for _, t := range ts {
		v := "-"
		if !math.IsNaN(t.value) {
			v = strconv.FormatFloat(t.value, 'f', 2, 64)
		}
		met := "yes"
		if !t.met {
			met = "**no**"
		}
		rows = append(rows, []string{t.name, v, t.bound, met})
	}
	writeTable(out, rows)
	fmt.Fprintln(out)
}
