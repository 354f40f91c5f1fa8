package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/dashboard"
)

// runWatch is dlock list --watch: the rows of dlock top printed every interval,
// one block after the other, for a pipe or a log. Holder text is escaped.
func runWatch(ctx context.Context, e *env, st store, pattern string, interval time.Duration) int {
	w, err := dashboard.NewWatcher(st.inspector(), dashboard.Options{Pattern: pattern, Interval: interval})
	if err != nil {
		return fail(e, "list", err)
	}
	_ = w.Run(ctx, func(s dashboard.Snapshot) { writeWatch(e.stdout, s) })
	return exitOK
}

// writeWatch prints one snapshot: a line with the time and the totals, the
// table, and a blank line.
func writeWatch(out io.Writer, s dashboard.Snapshot) {
	if s.Err != "" {
		fmt.Fprintf(out, "%s  read failed: %s\n\n", s.Time.Local().Format("15:04:05"), s.Err)
		return
	}
	fmt.Fprintf(out, "%s  %d held, %d waiting  (pattern %s, read in %v)\n", s.Time.Local().Format("15:04:05"),
		s.Held, s.Waiters, printable(s.Pattern), s.Took.Round(100*time.Microsecond))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tKIND\tHOLDER\tHELD\tTTL\tWAITERS\tHOLDERS\tACQ/S\tMARKS")
	for _, r := range s.Rows {
		ttl := ttlCell(r, 0)
		mark := ""
		if r.TTLLow {
			mark += " ttl-low"
		}
		if r.Vanished {
			mark += " not-renewed"
		}
		if mark == "" {
			mark = " -"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Key, r.Kind, r.Holder, heldText(r), ttl,
			strconv.Itoa(r.Waiters), holdText(r), rateText(r.Rate), mark[1:])
	}
	tw.Flush()
	fmt.Fprintln(out)
}

// watchFlags are the flags list adds for --watch.
type watchFlags struct {
	on       bool
	interval durationFlag
}

func (o *watchFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&o.on, "watch", false, "print the locks again every --interval, with kind, waiters, acquisitions/s and marks, until interrupted (dlock top for a terminal)")
	o.interval = durationFlag{d: dashboard.DefaultInterval, min: dashboard.MinInterval, max: time.Hour, def: "1s"}
	fs.Var(&o.interval, "interval", "with --watch: the `duration` between two reads")
}
