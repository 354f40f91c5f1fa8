package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == natsServerFlag { // the NATS server of a run
		if err := natsServerMain(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "bench nats server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == workerFlag { // scenario bp's workers
		if err := workerMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestQuickRun runs the whole -quick bench against a real redis-server, etcd and
// ZooKeeper and checks that every lock kept its critical sections apart and lost
// no update, that every variant made progress, and that every JSON line parses.
func TestQuickRun(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var tables, lines, progress bytes.Buffer
	ms, err := run(ctx, cfg, &tables, &lines, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	if strings.Contains(progress.String(), "error:") {
		t.Errorf("a run failed:\n%s", progress.String())
	}
	seen := map[string]int{}
	for _, m := range ms {
		if m.Kind != "run" {
			continue
		}
		seen[m.Scenario]++
		seen[m.Scenario+" "+m.Variant]++
		for _, f := range []string{"lost", "overlaps"} {
			if v, ok := m.M[f]; ok && v != 0 {
				t.Errorf("%s n=%d %s: %s = %v", m.Scenario, m.N, m.Variant, f, v)
			}
		}
		switch m.Scenario {
		case "a":
			if m.M["cycles"] == 0 {
				t.Errorf("a n=%d %s: no lock cycle", m.N, m.Variant)
			}
		case "b", "bc", "bp":
			if m.M["cs"] == 0 {
				t.Errorf("b n=%d %s: no critical section", m.N, m.Variant)
			}
			if _, ok := m.M["lost"]; !ok {
				t.Errorf("b n=%d %s: lost updates not measured", m.N, m.Variant)
			}
		case "p":
			if m.M["ops"] == 0 {
				t.Errorf("p n=%d %s: no operation", m.N, m.Variant)
			}
		case "c1", "c2":
			if m.M["handoffs"] == 0 {
				t.Errorf("%s n=%d %s: no hand-over", m.Scenario, m.N, m.Variant)
			}
		}
	}
	for _, s := range []string{"a", "b", "bc", "bp", "c1", "c2", "p", "a etcd", "a zk", "bc etcd", "bc zk"} {
		if seen[s] == 0 {
			t.Errorf("scenario %s produced no measurement", s)
		}
	}
	sc := bufio.NewScanner(&lines)
	n := 0
	for sc.Scan() {
		var o map[string]any
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Errorf("JSON line %q: %v", sc.Text(), err)
		}
		n++
	}
	if n <= len(ms) {
		t.Errorf("%d JSON lines for %d measurements", n, len(ms))
	}
	for _, want := range []string{"### a.", "### b.", "### bc.", "### bp.", "### c1.", "### c2.", "### p.", "× redsync default", "### Targets", "lost updates, every run", "### The price of consensus", "- etcd ", "- ZooKeeper "} {
		if !strings.Contains(tables.String(), want) {
			t.Errorf("tables lack %q", want)
		}
	}
	if t.Failed() {
		t.Log("\n" + tables.String())
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-quick", "-scenarios", "b", "-b-g", "2,3", "-variants", "dlock,raw"}, true},
		{[]string{"-scenarios", "d"}, false},
		{[]string{"-scenarios", ""}, false},
		{[]string{"-variants", "nosuch"}, false},
		{[]string{"-b-g", "0"}, false},
		{[]string{"-reps", "-1"}, false},
		{[]string{"-wait", "0s"}, false},
		{[]string{"extra"}, false},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q) = %v, want ok %v", tc.args, err, tc.ok)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

// TestNeeds checks that the etcd, ZooKeeper and PostgreSQL servers start only for runs that
// measure a variant locking on them.
func TestNeeds(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		etcd, zk, pg bool
	}{
		{nil, true, true, true},
		{[]string{"-variants", "dlock,raw"}, false, false, false},
		{[]string{"-variants", "dlock,etcd"}, true, false, false},
		{[]string{"-variants", "zk", "-scenarios", "bc"}, false, true, false},
		{[]string{"-variants", "pg", "-scenarios", "a"}, false, false, true},
		{[]string{"-scenarios", "b,bp,c"}, false, false, false},
	} {
		cfg, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if etcd, zk, pg := cfg.needs(onEtcd), cfg.needs(onZK), cfg.needs(onPG); etcd != tc.etcd || zk != tc.zk || pg != tc.pg {
			t.Errorf("%q: needs etcd %v, ZooKeeper %v, PostgreSQL %v; want %v, %v, %v", tc.args, etcd, zk, pg, tc.etcd, tc.zk, tc.pg)
		}
	}
}

func TestStats(t *testing.T) {
	if j := jain([]int64{5, 5, 5, 5}); j != 1 {
		t.Errorf("jain equal = %v, want 1", j)
	}
	if j := jain([]int64{8, 0, 0, 0}); j != 0.25 {
		t.Errorf("jain one-takes-all = %v, want 0.25", j)
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(ds, 0.5); p != 5 {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(ds, 0.99); p != 10 {
		t.Errorf("p99 = %v", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of nothing = %v", p)
	}
}

func TestFlat(t *testing.T) {
	for _, tc := range []struct {
		xs   []int64
		want bool
	}{
		{[]int64{0, 0, 0}, true},
		{[]int64{100, 105, 95, 100}, true},
		{[]int64{100, 100, 130}, false},
		{[]int64{0, 0, 5}, false},
		{[]int64{1351, 1090, 1001, 1042, 455}, false},
	} {
		if got := flat(tc.xs); got != tc.want {
			t.Errorf("flat(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestCheckTargets(t *testing.T) {
	run := func(scenario, variant string, n, rep int, m metrics) measurement {
		return measurement{Scenario: scenario, Kind: "run", Variant: variant, N: n, Rep: rep, M: m}
	}
	ms := []measurement{
		run("a", "raw", 1, 1, metrics{"cycles_per_s": 1000}),
		run("a", "dlock", 1, 1, metrics{"cycles_per_s": 960}),
		run("a", "raw", 1, 2, metrics{"cycles_per_s": 2000}),
		run("a", "dlock", 1, 2, metrics{"cycles_per_s": 1800}),
		run("a", "raw", 1, 3, metrics{"cycles_per_s": 500}),
		run("a", "dlock", 1, 3, metrics{"cycles_per_s": 490}),
		run("b", "dlock/fair", 16, 1, metrics{"handoffs_per_s": 2000, "timeouts": 0, "lost": 0, "overlaps": 0}),
		run("b", "dlock/fair", 16, 2, metrics{"handoffs_per_s": 2000, "timeouts": 1, "lost": 0, "overlaps": 0}),
		run("b", "redsync", 16, 1, metrics{"handoffs_per_s": 50, "lost": 0}),
		run("b", "redsync", 16, 2, metrics{"handoffs_per_s": 200, "lost": 3}),
	}
	byName := map[string]target{}
	for _, tg := range checkTargets(ms) {
		byName[tg.name] = tg
	}
	// Per-repetition ratios 0.96, 0.90, 0.98: median 0.96.
	if tg := byName["a G=1: dlock cycles/s × raw"]; tg.value != 0.96 || !tg.met {
		t.Errorf("a target = %+v, want 0.96, met", tg)
	}
	// Ratios 40 and 10: median 25.
	if tg := byName["b G=16: dlock/fair handoffs/s × redsync default"]; tg.value != 25 || !tg.met {
		t.Errorf("redsync target = %+v, want 25, met", tg)
	}
	if tg := byName["b G=16: dlock/fair timed-out acquires (worst run)"]; tg.value != 1 || tg.met {
		t.Errorf("timeouts target = %+v, want 1, not met", tg)
	}
	if tg := byName["lost updates, every run of every variant"]; tg.value != 3 || tg.met {
		t.Errorf("lost target = %+v, want 3, not met", tg)
	}
	if tg, ok := byName["b G=64: dlock/fair Jain index"]; ok {
		t.Errorf("target for a G not measured: %+v", tg)
	}
	for _, tg := range checkTargets(ms[:6]) { // scenario a only
		if strings.HasPrefix(tg.name, "lost") || strings.HasPrefix(tg.name, "overlapping") {
			t.Errorf("target without a counter measured: %+v", tg)
		}
	}
}
