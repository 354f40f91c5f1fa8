package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlock-go/dlock/dashboard"
	"golang.org/x/term"
)

// topFlags are the flags of dlock top.
type topFlags struct {
	servers  servers
	interval durationFlag
	sort     string
}

func (o *topFlags) define() *flag.FlagSet {
	fs := newFlagSet("top")
	o.servers.define(fs)
	o.interval = durationFlag{d: dashboard.DefaultInterval, min: dashboard.MinInterval, max: time.Hour, def: "1s"}
	fs.Var(&o.interval, "interval", "`duration` between two reads of the locks")
	fs.StringVar(&o.sort, "sort", "waiters", "order of the rows: `waiters`, age, churn or key")
	return fs
}

func topCommand() command {
	return command{
		name: "top", summary: "a live full-screen view of the held locks",
		synopsis: "dlock top [flags] [PATTERN]",
		help: `Shows the locks whose names match PATTERN (default *) on the whole terminal,
read again every --interval: key, kind, holder (host, pid, description), time
held, TTL left as a bar, waiters queued, holders (of a semaphore or readers),
acquisitions per second. Marks: ! the TTL is under a quarter of its length,
? the holder has not renewed for over half of it (probably gone). Holder text
is escaped. On narrow terminals the less needed columns go first.

keys:
  up/down, j/k   select a lock
  Enter          show the selected lock whole (key, holder, owner, every
                 field) under the table; Enter or Esc hides it
  s              sort by waiters, age, churn, key in turn
  /              filter by a text in the key or holder (Enter applies, Esc clears)
  u              force-unlock the selected lock, after a confirmation naming
                 its holder (y); an audit line goes to stderr
  q, Ctrl-C      quit

It needs a terminal; in a pipe, use "dlock list --watch".

examples:
  dlock top
  dlock top --sort churn 'deploy:*'
  dlock top --etcd http://127.0.0.1:2379 2>>unlock-audit.log`,
		flags: func() *flag.FlagSet { return new(topFlags).define() },
		run:   runTop,
	}
}

func runTop(ctx context.Context, e *env, args []string) int {
	c := topCommand()
	o := new(topFlags)
	pattern, code, ok := parsePattern(e, c, o.define(), args)
	if !ok {
		return code
	}
	by, err := dashboard.ParseSortBy(o.sort)
	if err != nil {
		return fail(e, c.name, usageErrorf("--sort %q: waiters, age, churn or key", o.sort))
	}
	in, iok := e.stdin.(*os.File)
	out, ook := e.stdout.(*os.File)
	if !iok || !ook || !term.IsTerminal(int(in.Fd())) || !term.IsTerminal(int(out.Fd())) {
		return fail(e, c.name, usageErrorf("needs a terminal on stdin and stdout; in a pipe use: dlock list --watch"))
	}
	st, err := o.servers.open(ctx, e)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer st.close()
	w, err := dashboard.NewWatcher(st.inspector(), dashboard.Options{Pattern: pattern, Interval: o.interval.d, DelayedKind: plainKind(st)})
	if err != nil {
		return fail(e, c.name, err)
	}
	v := &topView{e: e, w: w, in: in, out: out, where: st.String(), state: topState{sort: by}}
	if err := v.run(ctx); err != nil {
		return fail(e, c.name, err)
	}
	return exitOK
}

// topState is what the operator chose and sees besides the locks.
type topState struct {
	sort     dashboard.SortBy
	filter   string
	editing  bool   // typing a filter
	draft    string // the filter being typed
	selected string // the key of the selected row
	detail   bool   // the selected row is shown whole
	confirm  *dashboard.Row
	message  string
}

// topView is a running dlock top.
type topView struct {
	e       *env
	w       *dashboard.Watcher
	in, out *os.File
	where   string
	state   topState
	snap    dashboard.Snapshot
	audit   []string // audit lines held back while the screen is ours
}

const (
	enterScreen = "\x1b[?1049h\x1b[?25l" // the alternate screen, no cursor
	leaveScreen = "\x1b[?25h\x1b[?1049l"
)

func (v *topView) run(ctx context.Context) error {
	old, err := term.MakeRaw(int(v.in.Fd()))
	if err != nil {
		return fmt.Errorf("cannot put the terminal in raw mode: %w", err)
	}
	fmt.Fprint(v.out, enterScreen)
	defer func() {
		fmt.Fprint(v.out, leaveScreen)
		_ = term.Restore(int(v.in.Fd()), old)
		for _, l := range v.audit {
			fmt.Fprintln(v.e.stderr, l)
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		latest *dashboard.Snapshot
		fresh  = make(chan struct{}, 1)
		wg     sync.WaitGroup
	)
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = v.w.Run(ctx, func(s dashboard.Snapshot) {
			mu.Lock()
			latest = &s
			mu.Unlock()
			select {
			case fresh <- struct{}{}:
			default:
			}
		})
	}()
	// The reader of keys is left blocked in its Read when top ends; the
	// process ends right after.
	keys := make(chan []byte)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := v.in.Read(buf)
			if err != nil {
				close(keys)
				return
			}
			select {
			case keys <- append([]byte(nil), buf[:n]...):
			case <-ctx.Done():
				return
			}
		}
	}()
	resize := time.NewTicker(250 * time.Millisecond)
	defer resize.Stop()
	width, height := v.size()
	v.draw(width, height)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-fresh:
			mu.Lock()
			v.snap = *latest
			mu.Unlock()
		case b, ok := <-keys:
			if !ok || !v.key(ctx, b) {
				return nil
			}
		case <-resize.C:
			if w, h := v.size(); w == width && h == height {
				continue
			}
		}
		width, height = v.size()
		v.draw(width, height)
	}
}

func (v *topView) size() (int, int) {
	w, h, err := term.GetSize(int(v.out.Fd()))
	if err != nil || w <= 0 || h <= 0 {
		return 80, 24
	}
	return w, h
}

func (v *topView) draw(width, height int) {
	lines := renderTop(v.where, v.snap, &v.state, width, height, time.Now())
	var b bytes.Buffer
	b.WriteString("\x1b[H")
	for i, l := range lines {
		b.WriteString(l)
		b.WriteString("\x1b[K")
		if i < len(lines)-1 {
			b.WriteString("\r\n")
		}
	}
	b.WriteString("\x1b[J")
	_, _ = v.out.Write(b.Bytes())
}

// keys splits one read of the terminal into keys: escape sequences (arrows)
// and single characters.
func keys(b []byte) []string {
	var out []string
	s := string(b)
	for s != "" {
		n := 1
		switch {
		case len(s) >= 3 && (strings.HasPrefix(s, "\x1b[") || strings.HasPrefix(s, "\x1bO")):
			n = 3
			for n < len(s) && (s[n-1] < 0x40 || s[n-1] > 0x7e) { // up to the final byte
				n++
			}
		default:
			_, n = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// key handles one read of keys; false means quit.
func (v *topView) key(ctx context.Context, b []byte) bool {
	for _, k := range keys(b) {
		if !v.key1(ctx, k) {
			return false
		}
	}
	return true
}

// key1 handles one key; false means quit.
func (v *topView) key1(ctx context.Context, k string) bool {
	s := &v.state
	switch {
	case s.confirm != nil:
		r := *s.confirm
		s.confirm = nil
		if k == "y" || k == "Y" {
			v.unlock(ctx, r)
		} else {
			s.message = "not removed: " + r.Key
		}
		return true
	case s.editing:
		c, _ := utf8.DecodeRuneInString(k)
		switch {
		case k == "\r" || k == "\n":
			s.editing, s.filter = false, s.draft
		case k == "\x1b":
			s.editing, s.draft = false, s.filter
		case k == "\x7f" || k == "\b":
			if r := []rune(s.draft); len(r) > 0 {
				s.draft = string(r[:len(r)-1])
			}
		case k == "\x03":
			return false
		case len(k) == utf8.RuneLen(c) && unicode.IsPrint(c):
			s.draft += k
		}
		return true
	}
	switch k {
	case "q", "Q", "\x03", "\x04":
		return false
	case "s":
		order := []dashboard.SortBy{dashboard.SortWaiters, dashboard.SortAge, dashboard.SortChurn, dashboard.SortKey}
		for i, o := range order {
			if o == s.sort {
				s.sort = order[(i+1)%len(order)]
				break
			}
		}
		s.message = "sorted by " + string(s.sort)
	case "/":
		s.editing, s.draft = true, s.filter
	case "\r", "\n":
		s.detail = !s.detail
	case "\x1b":
		s.filter, s.message, s.detail = "", "", false
	case "j", "\x1b[B", "\x1bOB":
		v.move(1)
	case "k", "\x1b[A", "\x1bOA":
		v.move(-1)
	case "u":
		rows := visibleRows(v.snap, s)
		if r, ok := selectedRow(rows, s); ok && r.Held {
			s.confirm = &r
		} else {
			s.message = "no held lock selected"
		}
	}
	return true
}

func (v *topView) move(d int) {
	rows := visibleRows(v.snap, &v.state)
	if len(rows) == 0 {
		return
	}
	i := 0
	for j, r := range rows {
		if r.Key == v.state.selected {
			i = j + d
		}
	}
	v.state.selected = rows[min(max(i, 0), len(rows)-1)].Key
}

// unlock force-unlocks r if its holder, confirmed by the operator, still
// holds it, and writes the audit line.
func (v *topView) unlock(ctx context.Context, r dashboard.Row) {
	removed, err := v.w.ForceUnlock(ctx, r.Key, r.Owner)
	if err != nil {
		v.state.message = "not removed: " + oneLine(err)
		return
	}
	line := fmt.Sprintf("dlock top: %s force-unlocked %q held by %s (owner %s, token %d)",
		time.Now().UTC().Format(time.RFC3339), removed.Key, removed.Holder, removed.Owner, removed.Token)
	if v.e.stderrTTY {
		v.audit = append(v.audit, line) // printed when the screen is given back
	} else {
		fmt.Fprintln(v.e.stderr, line)
	}
	v.state.message = "removed " + strconv.Quote(removed.Key) + " held by " + removed.Holder
}

// visibleRows are the rows of s that pass the filter, in the chosen order.
func visibleRows(snap dashboard.Snapshot, s *topState) []dashboard.Row {
	f := strings.ToLower(s.filter)
	if s.editing {
		f = strings.ToLower(s.draft)
	}
	rows := make([]dashboard.Row, 0, len(snap.Rows))
	for _, r := range snap.Rows {
		if f == "" || strings.Contains(strings.ToLower(r.Key), f) || strings.Contains(strings.ToLower(r.Holder), f) {
			rows = append(rows, r)
		}
	}
	dashboard.Sort(rows, s.sort)
	return rows
}

// selectedRow returns the selected row, or the first when the selection is
// gone (and selects it).
func selectedRow(rows []dashboard.Row, s *topState) (dashboard.Row, bool) {
	for _, r := range rows {
		if r.Key == s.selected {
			return r, true
		}
	}
	if len(rows) == 0 {
		return dashboard.Row{}, false
	}
	s.selected = rows[0].Key
	return rows[0], true
}
