package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/dashboard"
)

// runWatch is dlock list --watch: the rows of dlock top printed every interval,
// one block after the other, for a pipe or a log. Holder text is escaped.
func runWatch(ctx context.Context, e *env, st store, pattern string, interval time.Duration) int {
	w, err := dashboard.NewWatcher(st.inspector(), dashboard.Options{Pattern: pattern, Interval: interval, DelayedKind: plainKind(st)})
	if err != nil {
		return fail(e, "list", err)
	}
	_ = w.Run(ctx, func(s dashboard.Snapshot) {
		writeWatch(e.stdout, s)
	})
	return exitOK
}

// writeWatch prints one snapshot: a line with the time and the totals, the
// table (see writeRows), and a blank line.
func writeWatch(out io.Writer, s dashboard.Snapshot) {
	if s.Err != "" {
		fmt.Fprintf(out, "%s  read failed: %s\n\n", s.Time.Local().Format("15:04:05"), s.Err)
		return
	}
	fmt.Fprintf(out, "%s  %d held, %s  (pattern %s, read in %v)\n", s.Time.Local().Format("15:04:05"),
		s.Held, waitingText(s), printable(s.Pattern), s.Took.Round(100*time.Microsecond))
	writeRows(out, s.Rows, s.Time, true)
	fmt.Fprintln(out)
}

// writeRows prints rows as the table of dlock list and of dlock list --watch:
// the same columns, one row a lock. The acquisitions per second and the marks
// need several reads: "-" in a single one (watch false). Holder text in rows
// is already escaped (dashboard.Printable), so that it cannot add rows or
// columns.
func writeRows(out io.Writer, rows []dashboard.Row, now time.Time, watch bool) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tKIND\tHOLDERS\tHOST\tPID\tSINCE\tTTL\tTOKEN\tWAITERS\tACQ/S\tMARKS\tDESCRIPTION")
	for _, r := range rows {
		host, pid, since, token, desc := "-", "-", "-", "-", r.Metadata
		if r.Host != "" || r.PID != 0 {
			host, pid = r.Host, strconv.Itoa(r.PID)
		}
		if r.Held && !r.SinceSeen {
			since = ago(now, r.Since) + " ago"
		}
		if r.Token != 0 {
			token = strconv.FormatUint(r.Token, 10)
		}
		if r.Description != "" {
			desc = r.Description
		}
		rate, mark := "-", "-"
		if watch {
			rate, mark = rateText(r.Rate), markText(r)
		}
		cols := []string{r.Key, r.Kind, holdersText(r.Held, r.Holders, r.Limit), host, pid, since,
			ttlCell(r, 0), token, waitersText(r.Waiters), rate, mark, desc}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	tw.Flush()
}

// markText names the marks of a row: ttl-low, not-renewed, or "-".
func markText(r dashboard.Row) string {
	var m []string
	if r.TTLLow {
		m = append(m, "ttl-low")
	}
	if r.Vanished {
		m = append(m, "not-renewed")
	}
	if len(m) == 0 {
		return "-"
	}
	return strings.Join(m, ",")
}

// waitersText is a lock's waiters as every view shows them: their number
// (0: nobody waits), or "?" where the store does not know them (they wait in
// their own processes: PostgreSQL's plain locks, Redlock).
func waitersText(n int) string {
	if n < 0 {
		return "?"
	}
	return strconv.Itoa(n)
}

// waitingText is the total of the waiters of a snapshot: "N waiting", with
// "≥" when the store does not know the waiters of some of its locks, and
// "? waiting" when it knows none.
func waitingText(s dashboard.Snapshot) string {
	switch {
	case s.WaitersUnknown == 0:
		return strconv.Itoa(s.Waiters) + " waiting"
	case s.WaitersUnknown >= s.Held && s.Waiters == 0:
		return "? waiting"
	}
	return "≥" + strconv.Itoa(s.Waiters) + " waiting"
}

// holdersText says how a lock is held, in a few words, in every view: "1" for
// an exclusive lock, "2 of 3" for a semaphore's permits, "4 shared" for
// readers, "-" when free.
func holdersText(held bool, holders, limit int) string {
	switch {
	case !held:
		return "-"
	case limit == 0:
		return strconv.Itoa(holders) + " shared"
	case limit > 1:
		return fmt.Sprintf("%d of %d", holders, limit)
	}
	return strconv.Itoa(holders)
}

// watchFlags are the flags list adds for --watch.
type watchFlags struct {
	on       bool
	interval durationFlag
}

func (o *watchFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&o.on, "watch", false, "print the table again every --interval, with the acquisitions/s and marks filled in, until interrupted (dlock top for a terminal)")
	o.interval = durationFlag{d: dashboard.DefaultInterval, min: dashboard.MinInterval, max: time.Hour, def: "1s"}
	fs.Var(&o.interval, "interval", "with --watch: the `duration` between two reads")
}
