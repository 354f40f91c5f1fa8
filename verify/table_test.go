package verify

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

var tableFlag = flag.String("table", "", "write the markdown table of the scenarios run to this file")

// tally is what the runs of one scenario add up to.
type tally struct {
	sc                        scenario
	seeds                     []uint64
	ops, grants, faults, viol int
	forces                    int // the faults that were force-unlocks
	// injected and bit count the faults by name, and those of them that
	// had the effect they are injected for (Stats.Bit).
	injected, bit map[string]int
}

var (
	talliesMu sync.Mutex
	tallies   = map[string]*tally{}
)

// record adds a run to its scenario's tally, for -table.
func record(sc scenario, seed uint64, r *Result) {
	talliesMu.Lock()
	defer talliesMu.Unlock()
	tl := tallies[sc.name]
	if tl == nil {
		tl = &tally{sc: sc, injected: map[string]int{}, bit: map[string]int{}}
		tallies[sc.name] = tl
	}
	tl.seeds = append(tl.seeds, seed)
	tl.ops += r.Stats.Ops
	tl.grants += r.Stats.Grants
	tl.faults += r.Stats.Faults
	tl.forces += r.Stats.ByFault[FaultForce]
	tl.viol += len(r.Violations)
	for f, n := range r.Stats.ByFault {
		tl.injected[f] += n
	}
	for f, n := range r.Stats.Bit {
		tl.bit[f] += n
	}
	if *tableFlag != "" {
		// Written after every run, so that a long run cut short keeps
		// the rows of the scenarios it ran (go test -skip the ones done
		// to go on with the rest).
		if err := writeTableLocked(*tableFlag); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}

// writeTable writes the tallies as the markdown table of docs/safety.md.
func writeTable(path string) error {
	talliesMu.Lock()
	defer talliesMu.Unlock()
	return writeTableLocked(path)
}

// writeTableLocked is writeTable with talliesMu held.
func writeTableLocked(path string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| Scenario | Properties checked | Faults injected | Seeds | Operations | Grants | Faults | Faults that bit | Violations |\n|---|---|---|---|---|---|---|---|---|\n")
	var names []string
	for n := range tallies {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		tl := tallies[n]
		faults := strings.Join(tl.sc.faults, ", ")
		if faults == "" {
			faults = "none"
		}
		if tl.sc.persist != "" {
			faults += " (" + tl.sc.persist + ")"
		}
		// The force-unlocks are faults of the operator, not of the
		// store or the network: their share is named.
		count := fmt.Sprint(tl.faults)
		if tl.forces > 0 {
			count += fmt.Sprintf(" (%d force)", tl.forces)
		}
		bit := Stats{ByFault: tl.injected, Bit: tl.bit}.BitSummary()
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %s | %s | %d |\n", n, tl.sc.props, faults, len(tl.seeds), tl.ops, tl.grants, count, bit, tl.viol)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
