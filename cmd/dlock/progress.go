package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// failureEvery is how often a waiting run repeats, on stderr that is not a
// terminal, why the server fails it.
const failureEvery = 5 * time.Second

// progress tells what dlock run is waiting for. On a terminal it redraws one
// line of stderr every second: how long it has waited, and who holds the lock
// or why the server fails. Elsewhere (a pipe, a log file, cron) it writes a line
// only while the server fails, at most every failureEvery: a busy lock is
// waited for silently, a server that refuses every attempt is not.
type progress struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	e      *env
	redraw bool // it draws on a terminal: stop clears the line
}

// startProgress starts telling what run waits for; holders says whether a
// terminal gets the holder's line too (not with --quiet).
func startProgress(ctx context.Context, e *env, st store, key string, since time.Time, holders bool) *progress {
	ctx, cancel := context.WithCancel(ctx)
	p := &progress{cancel: cancel, e: e, redraw: e.stderrTTY}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		var lastSaid time.Time
		for {
			why := st.failures().last()
			waited := time.Since(since).Round(time.Second)
			switch {
			case why != "" && !p.redraw:
				if lastSaid.IsZero() || time.Since(lastSaid) >= failureEvery {
					lastSaid = time.Now()
					fmt.Fprintf(e.stderr, "dlock run: waiting %v for %q: %s failed: %s\n", waited, key, st, why)
				}
			case why != "":
				line := fmt.Sprintf("dlock: waiting %v for %q: %s failed: %s", waited, key, st, why)
				fmt.Fprint(e.stderr, "\r\x1b[K"+fit(line, e.width()))
			case p.redraw && holders:
				who := p.holder(ctx, st, key)
				if ctx.Err() != nil {
					return
				}
				line := fmt.Sprintf("dlock: waiting %v for %q, held by %s", waited, key, who)
				if w := e.width(); w > 0 && utf8.RuneCountInString(line) >= w {
					// The key is on the command line already: the holder matters more.
					line = fmt.Sprintf("dlock: waiting %v, held by %s", waited, who)
				}
				fmt.Fprint(e.stderr, "\r\x1b[K"+fit(line, e.width()))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// holder describes the lock's holder for the waiting line: its description
// first, so that a narrow terminal still shows it.
func (p *progress) holder(ctx context.Context, st store, key string) string {
	ictx, icancel := context.WithTimeout(ctx, progressEvery)
	defer icancel()
	li, err := inspectLock(ictx, st, key)
	if err == nil && !li.Held && li.DelayMS > 0 {
		return "nobody: " + li.delayLine()
	}
	if err != nil || !li.Held {
		return "another process"
	}
	who := li.holderLine(time.Now())
	if h := li.Holder; h != nil && h.Description != "" {
		plain := li
		desc := *h
		desc.Description = ""
		plain.Holder = &desc
		who = strconv.Quote(h.Description) + " (" + plain.holderLine(time.Now())
		if li.TTLms > 0 {
			who += ", ttl " + ttlString(li.TTLms)
		}
		return who + ")"
	}
	if li.TTLms > 0 {
		who += ", ttl " + ttlString(li.TTLms)
	}
	return who
}

// stop ends the display and clears its line. A nil progress does nothing.
func (p *progress) stop() {
	if p == nil {
		return
	}
	p.cancel()
	p.done.Wait()
	if p.redraw {
		fmt.Fprint(p.e.stderr, "\r\x1b[K")
	}
}

// fit shortens line to fewer than width columns, so that redrawing it never
// wraps; a width of 0 (unknown) leaves it alone. A shortened line ends in "…".
func fit(line string, width int) string {
	if width <= 0 || utf8.RuneCountInString(line) < width {
		return line
	}
	if width < 2 {
		return ""
	}
	runes := []rune(line)
	return string(runes[:width-2]) + "…"
}
