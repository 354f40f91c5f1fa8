package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// recipes maps a dlock variant on etcd, ZooKeeper or PostgreSQL to the variant of the
// store's own lock recipe it is compared with (see recipesOf for the others).
var recipes = map[string]string{
	"etcd":        "etcd/mutex",
	"zk":          "zk/recipe",
	"pg":          "pg/advisory",
	"pg/unlogged": "pg/advisory",
}

// tableRecipes prints, for scenarios a and bc, each variant of recipes next to
// its recipe: throughputs, the median of the per-repetition ratios, and requests
// per operation (client and server side). It prints nothing when no pair ran.
func tableRecipes(out io.Writer, ms []measurement) {
	// The runs of scenarios a and bc by scenario, G and variant, then
	// repetition.
	type key struct {
		scenario, variant string
		n                 int
	}
	runs := map[key]map[int]metrics{}
	var ns []int
	for _, m := range ms {
		if k := (key{m.Scenario, m.Variant, m.N}); m.Kind == "run" && (k.scenario == "a" || k.scenario == "bc") {
			reps := runs[k]
			if reps == nil {
				reps = map[int]metrics{}
				runs[k] = reps
			}
			reps[m.Rep], ns = m.M, append(ns, m.N)
		}
	}
	slices.Sort(ns)
	ns = slices.Compact(ns)
	rows := [][]string{
		{"variant", "recipe", "scenario", "G", "ops/s", "recipe ops/s", "× recipe", "requests/op client", "recipe", "server", "recipe"},
		{"---", "---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"},
	}
	for _, sc := range []struct{ name, what, ops, cmds string }{
		{"a", "a: cycles/s", "cycles_per_s", "cmds_per_cycle"},
		{"bc", "bc: hand-overs/s", "handoffs_per_s", "cmds_per_cs"},
	} {
		for _, n := range ns {
			for _, v := range variants {
				for _, ref := range recipesOf(v.name) {
					rs, rr := runs[key{sc.name, v.name, n}], runs[key{sc.name, ref, n}]
					if rs == nil || rr == nil {
						continue
					}
					col := func(rs map[int]metrics, f string) float64 {
						var xs []float64
						for _, m := range rs {
							if x, ok := m[f]; ok && !math.IsNaN(x) {
								xs = append(xs, x)
							}
						}
						return median(xs)
					}
					var ratios []float64
					for rep, m := range rs {
						if r, ok := rr[rep]; ok {
							ratios = append(ratios, ratio(m[sc.ops], r[sc.ops]))
						}
					}
					rows = append(rows, []string{v.name, ref, sc.what, strconv.Itoa(n),
						fmt.Sprintf("%.0f", col(rs, sc.ops)), fmt.Sprintf("%.0f", col(rr, sc.ops)), fmtNaN("%.2f", median(ratios)),
						fmtNaN("%.2f", col(rs, sc.cmds+"_client")), fmtNaN("%.2f", col(rr, sc.cmds+"_client")),
						fmtNaN("%.2f", col(rs, sc.cmds+"_server")), fmtNaN("%.2f", col(rr, sc.cmds+"_server"))})
				}
			}
		}
	}
	if len(rows) == 2 {
		return
	}
	fmt.Fprintf(out, "### dlock against the store's own recipe (medians; × recipe = median of per-repetition ratios)\n\n")
	writeTable(out, rows)
	fmt.Fprintln(out)
}
