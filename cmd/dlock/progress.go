package main

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"
)

// progress shows on a terminal that dlock run is waiting, for how long, and who
// holds the lock, redrawing one line of stderr.
type progress struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	e      *env
}

func startProgress(ctx context.Context, e *env, st store, key string, since time.Time) *progress {
	ctx, cancel := context.WithCancel(ctx)
	p := &progress{cancel: cancel, e: e}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			ictx, icancel := context.WithTimeout(ctx, progressEvery)
			who := "another process"
			if li, err := inspectLock(ictx, st, key); err == nil && li.Held {
				who = li.holderLine(time.Now())
				if li.TTLms > 0 {
					who += ", ttl " + ttlString(li.TTLms)
				}
			}
			icancel()
			if ctx.Err() != nil {
				return
			}
			line := fmt.Sprintf("dlock: waiting %v for %q, held by %s", time.Since(since).Round(time.Second), key, who)
			fmt.Fprint(e.stderr, "\r\x1b[K"+fit(line, e.width()))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// stop ends the display and clears its line. A nil progress does nothing.
func (p *progress) stop() {
	if p == nil {
		return
	}
	p.cancel()
	p.done.Wait()
	fmt.Fprint(p.e.stderr, "\r\x1b[K")
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
