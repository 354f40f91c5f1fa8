package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dashboard"
	"github.com/dlock-go/dlock/internal/holder"
)

// lockInfo is one lock as status, list and unlock print it; its JSON form is
// what --json prints.
type lockInfo struct {
	Key       string         `json:"key"`
	Held      bool           `json:"held"`
	Token     uint64         `json:"token,omitempty"`
	TTLms     int64          `json:"ttl_ms,omitempty"`
	Holder    *holder.Record `json:"holder,omitempty"`
	Metadata  string         `json:"metadata,omitempty"` // when not written by dlock run
	LastToken uint64         `json:"last_token,omitempty"`
	Waiters   int            `json:"waiters"`            // waiters the store knows of (a plain lock's: waiting processes); -1 where it does not know them
	Holders   int            `json:"holders,omitempty"`  // leases held: 1, a semaphore's permits in use, a read lock's readers
	Limit     int            `json:"limit,omitempty"`    // 1 exclusive, N a semaphore, 0 (omitted) shared by readers
	DelayMS   int64          `json:"delay_ms,omitempty"` // free, but in its lock-delay for this long more
	DelayTo   *time.Time     `json:"delay_until,omitempty"`
}

// holders says how the lock is held, in a few words (see holdersText).
func (li lockInfo) holders() string { return holdersText(li.Held, li.Holders, li.Limit) }

// parseMeta reads the metadata of a lock: the holder record when dlock run
// wrote it, and otherwise the raw text. The record's time becomes the
// acquisition's, to the millisecond, when the fencing token tells it (see
// holder.Record.AcquiredAt).
func parseMeta(raw string, token uint64) (*holder.Record, string) {
	m := holder.Parse(raw)
	if m == nil {
		return nil, raw
	}
	if at := m.AcquiredAt(token, time.Now()); !at.Equal(m.Since) {
		m.Since = at.UTC().Truncate(time.Millisecond)
	}
	return m, ""
}

// holderLine is a one-line description of who holds a lock.
func (li lockInfo) holderLine(now time.Time) string {
	if !li.Held {
		return "nobody"
	}
	var parts []string
	if h := li.Holder; h != nil {
		who := printable(h.Host)
		if h.PID != 0 {
			who += " pid " + strconv.Itoa(h.PID)
		}
		if h.User != "" {
			who = printable(h.User) + "@" + who
		}
		parts = append(parts, strings.TrimSpace(who))
		parts = append(parts, "since "+h.Since.Local().Format("15:04:05")+" ("+ago(now, h.Since)+" ago)")
		if h.Description != "" {
			parts = append(parts, strconv.Quote(h.Description))
		}
	} else if li.Metadata != "" {
		parts = append(parts, strconv.Quote(li.Metadata))
	} else {
		parts = append(parts, "an unnamed holder")
	}
	return strings.Join(parts, " ")
}

func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func ttlString(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

// inspectFlags are the flags of status, list and unlock.
type inspectFlags struct {
	servers servers
	json    bool
	names   bool
	force   bool
	watch   watchFlags
}

func (o *inspectFlags) define(name string) *flag.FlagSet {
	fs := newFlagSet(name)
	o.servers.define(fs)
	fs.BoolVar(&o.json, "json", false, "print JSON for scripts")
	if name == "list" {
		fs.BoolVar(&o.names, "names", false, "print only the names of the held locks, one a line")
		o.watch.define(fs)
	}
	if name == "unlock" {
		fs.BoolVar(&o.force, "force", false, "really remove a lock another process holds")
	}
	return fs
}

func statusCommand() command {
	return command{
		name: "status", summary: "show who holds a lock, its TTL and fencing token",
		synopsis: "dlock status [flags] KEY",
		help: `Shows whether KEY is held and by whom (host, pid, user, since when, the
description given to "dlock run --description"), the time left before it expires
unless renewed, and its fencing token. Exits 0 when the lock is held, 1 when it
is free.

examples:
  dlock status nightly-report
  dlock status --json nightly-report | jq .holder.host
  dlock status nightly-report >/dev/null && echo busy`,
		flags: func() *flag.FlagSet { return new(inspectFlags).define("status") },
		run:   runStatus,
	}
}

func listCommand() command {
	return command{
		name: "list", summary: "list held locks whose names match a pattern",
		synopsis: "dlock list [flags] [PATTERN]",
		help: `Lists the held locks whose names match PATTERN (a Redis glob: * ? [abc];
default *), and those in their lock-delay (see run --lock-delay; --json:
delay_ms, delay_until): key, kind, holders, host, pid, since when, TTL left, fencing token,
waiters (? where the store cannot know them), and the holder's description, in
the columns of --watch (whose acquisitions/s and marks need several reads: "-"
here). On a Redis Cluster every master is scanned.

examples:
  dlock list
  dlock list 'deploy:*'
  dlock list --json | jq -r '.[].key'
  dlock list --names 'cron:*' | xargs -n1 dlock status`,
		flags: func() *flag.FlagSet { return new(inspectFlags).define("list") },
		run:   runList,
	}
}

func unlockCommand() command {
	return command{
		name: "unlock", summary: "remove a lock whoever holds it (admin; needs --force), or release one from its reference",
		synopsis: "dlock unlock --force [flags] KEY | dlock unlock [flags] REF",
		help: `Removes the lock KEY whoever holds it and says whose lock it removed. The
holder is told at once (Redis, Redlock, etcd, ZooKeeper and PostgreSQL push
the news to it; a holder that missed it notices at its next renewal): a
"dlock run" holding it stops its command and exits 76. The fencing counter is kept, so the next holder's token
is still greater than every earlier one. Refuses without --force (exit 64); exits
1 when the lock is free.

Given a reference that "dlock lock" or "dlock extend" printed instead of a KEY,
it releases that holding, owner-checked, without --force: exit 0 when released,
1 when the holding was gone already (nothing touched).

examples:
  dlock unlock --force nightly-report
  dlock unlock "$REF"
  dlock unlock --force --json nightly-report`,
		flags: func() *flag.FlagSet { return new(inspectFlags).define("unlock") },
		run:   runUnlock,
	}
}

// withStore parses the flags and the single argument of status, list and
// unlock, connects, and runs fn. def is the argument's default ("" = a
// required KEY).
func withStore(ctx context.Context, e *env, c command, args []string, def string, fn func(o *inspectFlags, arg string, st store) int) int {
	o := new(inspectFlags)
	fs := o.define(c.name)
	a, code, ok := parseFlags(e, c, fs, args)
	if !ok {
		return code
	}
	rest := append(a.before, a.after...)
	arg := def
	switch {
	case len(rest) == 1:
		arg = rest[0]
	case len(rest) > 1:
		return fail(e, c.name, usageErrorf("one %s expected, got %d arguments: %s", strings.Fields(c.synopsis)[len(strings.Fields(c.synopsis))-1], len(rest), strings.Join(rest, " ")))
	case arg == "":
		return fail(e, c.name, usageErrorf("missing KEY"))
	}
	if def == "" && !(c.name == "unlock" && strings.HasPrefix(arg, driver.RefPrefix)) {
		if err := driver.ValidateKey(arg); err != nil {
			return fail(e, c.name, err)
		}
	}
	if c.name == "unlock" && strings.HasPrefix(arg, driver.RefPrefix) {
		return unlockRef(ctx, e, &o.servers, arg)
	}
	if c.name == "unlock" && !o.force {
		return fail(e, c.name, usageErrorf("refusing to remove %q without --force (it may be held by a running job)", arg))
	}
	st, err := o.servers.open(ctx, e)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer st.close()
	return fn(o, arg, st)
}

func runStatus(ctx context.Context, e *env, args []string) int {
	c := statusCommand()
	return withStore(ctx, e, c, args, "", func(o *inspectFlags, key string, st store) int {
		li, err := inspectLock(ctx, st, key)
		switch {
		case err != nil:
			return fail(e, c.name, err)
		case o.json:
			writeJSON(e.stdout, li)
		default:
			writeStatus(e.stdout, li, time.Now())
		}
		if !li.Held {
			return exitFailure
		}
		return exitOK
	})
}

// delayLine says that a lock nobody holds is in its lock-delay, until when:
// "is in its lock-delay until 15:04:05.000 (1.2s left): ..."; "" when it is
// not.
func (li lockInfo) delayLine() string {
	if li.Held || li.DelayMS <= 0 || li.DelayTo == nil {
		return ""
	}
	return fmt.Sprintf("is in its lock-delay until %s (%s left): its last holding ended without a release",
		li.DelayTo.Local().Format("15:04:05.000"), ttlString(li.DelayMS))
}

// writeStatus prints one lock as a table of fields, holder-supplied text
// escaped (see printable).
func writeStatus(w io.Writer, li lockInfo, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\n", printable(li.Key))
	if d := li.delayLine(); d != "" {
		fmt.Fprintf(tw, "state\t%s\n", strings.TrimPrefix(d, "is "))
	} else if !li.Held {
		fmt.Fprintf(tw, "state\tfree\n")
	}
	if !li.Held {
		if li.LastToken != 0 {
			fmt.Fprintf(tw, "last token\t%d\n", li.LastToken)
		}
		tw.Flush()
		return
	}
	fmt.Fprintf(tw, "state\theld\n")
	if li.Limit != 1 && li.Holders > 0 {
		what := "permits in use"
		if li.Limit == 0 {
			what = "readers; shown: the one whose lease ends last"
		}
		fmt.Fprintf(tw, "holders\t%s (%s)\n", li.holders(), what)
	}
	if h := li.Holder; h != nil {
		fmt.Fprintf(tw, "host\t%s\n", printable(h.Host))
		fmt.Fprintf(tw, "pid\t%d\n", h.PID)
		if h.User != "" {
			fmt.Fprintf(tw, "user\t%s\n", printable(h.User))
		}
		fmt.Fprintf(tw, "since\t%s (%s ago)\n", h.Since.Local().Format(time.RFC3339), ago(now, h.Since))
		if h.Description != "" {
			fmt.Fprintf(tw, "description\t%s\n", printable(h.Description))
		}
	} else if li.Metadata != "" {
		fmt.Fprintf(tw, "metadata\t%s\n", printable(li.Metadata))
	}
	fmt.Fprintf(tw, "ttl\t%s\n", ttlString(li.TTLms))
	fmt.Fprintf(tw, "token\t%d\n", li.Token)
	switch {
	case li.Waiters > 0:
		fmt.Fprintf(tw, "waiters\t%d\n", li.Waiters)
	case li.Waiters < 0:
		fmt.Fprintf(tw, "waiters\t? (not known to this store: they wait in their own processes)\n")
	}
	tw.Flush()
}

func runList(ctx context.Context, e *env, args []string) int {
	c := listCommand()
	return withStore(ctx, e, c, args, "*", func(o *inspectFlags, pattern string, st store) int {
		if o.watch.on {
			return runWatch(ctx, e, st, pattern, o.watch.interval.d)
		}
		if !o.json && !o.names {
			// The table: the rows of list --watch, from one read.
			w, err := dashboard.NewWatcher(st.inspector(), dashboard.Options{Pattern: pattern, DelayedKind: plainKind(st)})
			if err != nil {
				return fail(e, c.name, err)
			}
			s, err := w.Refresh(ctx)
			if err != nil {
				return fail(e, c.name, err)
			}
			writeRows(e.stdout, s.Rows, s.Time, false)
			return exitOK
		}
		infos, err := listLocks(ctx, st, pattern)
		switch {
		case err != nil:
			return fail(e, c.name, err)
		case o.json:
			writeJSON(e.stdout, infos)
		default:
			for _, li := range infos {
				fmt.Fprintln(e.stdout, li.Key)
			}
		}
		return exitOK
	})
}

func runUnlock(ctx context.Context, e *env, args []string) int {
	c := unlockCommand()
	return withStore(ctx, e, c, args, "", func(o *inspectFlags, key string, st store) int {
		li, err := forceUnlock(ctx, st, key)
		switch {
		case errors.Is(err, dlock.ErrNotHeld):
			fmt.Fprintf(e.stderr, "dlock unlock: %q is not held: nothing removed\n", key)
			return exitFailure
		case err != nil:
			return fail(e, c.name, err)
		case o.json:
			writeJSON(e.stdout, li)
		default:
			fmt.Fprintf(e.stdout, "removed lock %q held by %s (token %d, %s left)\n", key, li.holderLine(time.Now()), li.Token, ttlString(li.TTLms))
		}
		return exitOK
	})
}

// writeJSON prints v as indented JSON, with the control characters that
// encoding/json leaves raw escaped too (see escapeJSONControls).
func writeJSON(w io.Writer, v any) {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return // lockInfo always encodes
	}
	_, _ = w.Write(append(escapeJSONControls(js), '\n')) // a closed pipe is not an error worth reporting
}
