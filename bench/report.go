package main

import (
	"fmt"
	"io"
	"math"
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

func tableA(out io.Writer, g int, ms []measurement) {
	table(out, fmt.Sprintf("a. uncontended, G = %d goroutines, each on its own key (medians; × raw = median of per-repetition ratios)", g), ms, []column{
		{"cycles/s", "cycles_per_s", "%.0f"},
		{"× raw", "cycles_per_s_vs_raw", "%.2f"},
		{"p50 µs", "lat_p50_us", "%.0f"},
		{"× raw", "lat_p50_us_vs_raw", "%.2f"},
		{"p99 µs", "lat_p99_us", "%.0f"},
		{"× raw", "lat_p99_us_vs_raw", "%.2f"},
		{"cmds/cycle client", "cmds_per_cycle_client", "%.2f"},
		{"server", "cmds_per_cycle_server", "%.2f"},
		{"errors", "errors", "%.0f"},
	})
}

func tableB(out io.Writer, g int, ms []measurement) {
	table(out, fmt.Sprintf("b. one key, G = %d goroutines, GET+SET increment inside the lock (medians)", g), ms, []column{
		{"CS/s", "cs_per_s", "%.0f"},
		{"handoffs/s", "handoffs_per_s", "%.0f"},
		{"handoff %", "handoff_pct", "%.1f"},
		{"wait p50 ms", "wait_p50_ms", "%.2f"},
		{"p99 ms", "wait_p99_ms", "%.1f"},
		{"max ms", "wait_max_ms", "%.1f"},
		{"max/(G·CS)", "wait_max_per_g_cs", "%.1f"},
		{"timed out", "timeouts", "%.0f"},
		{"Jain", "jain", "%.2f"},
		{"lost", "lost", "%.0f"},
		{"overlaps", "overlaps", "%.0f"},
		{"cmds/CS client", "cmds_per_cs_client", "%.2f"},
		{"server", "cmds_per_cs_server", "%.2f"},
		{"errors", "errors", "%.0f"},
	})
}

func tableC(out io.Writer, scenario string, n int, ms []measurement) {
	title := fmt.Sprintf("c1. %d waiters on one key, then the lock passes through all of them (medians)", n)
	if scenario == "c2" {
		title = fmt.Sprintf("c2. %d keys, each held with one waiter, then every holder releases (medians)", n)
	}
	table(out, title, ms, []column{
		{"waiters", "waiters", "%.0f"},
		{"idle cmds/s client", "idle_cmds_per_s_client", "%.0f"},
		{"server", "idle_cmds_per_s_server", "%.0f"},
		{"conns", "conns", "%.0f"},
		{"sub conns", "sub_conns", "%.0f"},
		{"channels", "channels", "%.0f"},
		{"bytes/waiter", "bytes_per_waiter", "%.0f"},
		{"handoffs", "handoffs", "%.0f"},
		{"in s", "drain_s", "%.2f"},
		{"handoffs/s", "handoffs_per_s", "%.0f"},
		{"cmds/handoff client", "cmds_per_handoff_client", "%.2f"},
		{"server", "cmds_per_handoff_server", "%.2f"},
		{"lost", "lost", "%.0f"},
		{"overlaps", "overlaps", "%.0f"},
		{"errors", "errors", "%.0f"},
	})
}

// headlineB prints, for every dlock variant and G of scenario b, its hand-overs per
// second against redsync with its default retry and against the best peer
// polling every millisecond, from the medians in meds.
func headlineB(out io.Writer, meds []measurement) {
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
