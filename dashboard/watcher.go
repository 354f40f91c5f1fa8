// Package dashboard is a live view of the locks of any dlock backend: a Watcher
// that reads a driver.Inspector every interval and keeps, for every lock, what an
// operator looks at first (who holds it, for how long, the TTL left, the waiters,
// how often it changes hands, and marks for a TTL about to run out and for a
// holder that stopped renewing), with a short history for plots; and an
// http.Handler serving that view as one self-contained web page and as JSON,
// which a service can mount on its admin port. The dlock command's "top",
// "list --watch" and "serve" are built on it.
//
//	// On a service's admin port, beside its other debug pages:
//	admin.Handle("/debug/locks/", http.StripPrefix("/debug/locks", dashboard.Handler(locker, dashboard.Options{Title: "billing"})))
//
// The page and the JSON have no authentication of their own: mount the Handler
// where only operators reach it, and enable force-unlock (Options.AllowUnlock)
// only there.
package dashboard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// Watcher reads the locks of an Inspector and keeps the rows of the views. Its
// methods are safe for concurrent use. It starts no goroutine: Refresh (or Run)
// does the reading.
type Watcher struct {
	in       driver.Inspector
	opts     Options
	now      func() time.Time
	bucket   time.Duration
	refresh  sync.Mutex // serializes reads
	mu       sync.Mutex // guards the fields below
	tracks   map[string]*track
	totals   history
	snap     Snapshot
	lastRead time.Time
}

// NewWatcher returns a Watcher of the locks of in that match opts.Pattern. The
// error matches dlock.ErrInvalid for a bad pattern or a nil Inspector.
func NewWatcher(in driver.Inspector, opts Options) (*Watcher, error) {
	if in == nil {
		return nil, fmt.Errorf("%w: dashboard: nil Inspector", dlock.ErrInvalid)
	}
	if opts.Pattern == "" {
		opts.Pattern = "*"
	}
	if err := driver.ValidatePattern(opts.Pattern); err != nil {
		return nil, err
	}
	switch {
	case opts.Interval == 0:
		opts.Interval = DefaultInterval
	case opts.Interval < MinInterval:
		return nil, fmt.Errorf("%w: dashboard: interval %v below %v", dlock.ErrInvalid, opts.Interval, MinInterval)
	}
	switch {
	case opts.History == 0:
		opts.History = DefaultHistory
	case opts.History < opts.Interval:
		return nil, fmt.Errorf("%w: dashboard: history %v shorter than the interval %v", dlock.ErrInvalid, opts.History, opts.Interval)
	}
	w := &Watcher{in: in, opts: opts, now: time.Now, tracks: map[string]*track{}}
	w.bucket = max(opts.History/historyPoints, time.Millisecond)
	w.snap = Snapshot{Pattern: opts.Pattern, Interval: opts.Interval, Rows: []Row{}, Totals: []Point{}}
	return w, nil
}

// Options returns the Watcher's options, defaults filled in.
func (w *Watcher) Options() Options { return w.opts }

// Snapshot returns the state after the last Refresh.
func (w *Watcher) Snapshot() Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.snap
	s.Rows = append([]Row(nil), s.Rows...)
	s.Totals = append([]Point(nil), s.Totals...)
	return s
}

// History returns the history of the lock named key, oldest first (nil for a
// lock not watched).
func (w *Watcher) History(key string) []Point {
	w.mu.Lock()
	defer w.mu.Unlock()
	tr := w.tracks[key]
	if tr == nil {
		return nil
	}
	return tr.hist.points(w.lastRead, w.bucket)
}

// Run refreshes every interval until ctx ends, and calls each (when not nil)
// with every snapshot. A failed read does not stop it: the snapshot says why
// (Snapshot.Err). It returns ctx's error.
func (w *Watcher) Run(ctx context.Context, each func(Snapshot)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		start := time.Now()
		s, _ := w.Refresh(ctx)
		if each != nil && ctx.Err() == nil {
			each(s)
		}
		t.Reset(max(w.opts.Interval-time.Since(start), time.Millisecond))
	}
}

// Refresh reads the locks once and returns the new snapshot. On a failed read
// the rows of the last one are kept and the error is returned and noted in the
// snapshot. The read is bounded by ten intervals (at least five seconds).
func (w *Watcher) Refresh(ctx context.Context) (Snapshot, error) {
	w.refresh.Lock()
	defer w.refresh.Unlock()
	return w.read(ctx)
}

// refreshIfOld refreshes unless the last read is younger than most of an
// interval, and returns the snapshot: the Handler's read, shared by the pages
// that poll it.
func (w *Watcher) refreshIfOld(ctx context.Context) Snapshot {
	w.refresh.Lock()
	defer w.refresh.Unlock()
	w.mu.Lock()
	fresh := !w.lastRead.IsZero() && w.now().Sub(w.lastRead) < w.opts.Interval*8/10
	w.mu.Unlock()
	if !fresh {
		_, _ = w.read(ctx)
	}
	return w.Snapshot()
}

func (w *Watcher) read(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, max(5*time.Second, 10*w.opts.Interval))
	defer cancel()
	start := w.now()
	infos, err := driver.List(ctx, w.in, w.opts.Pattern)
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.snap.Time, w.snap.Took = now, now.Sub(start)
	if err != nil {
		w.snap.Err = Printable(err.Error())
		return w.snapshotLocked(), err
	}
	w.snap.Err = ""
	w.lastRead = now
	w.update(infos, now)
	return w.snapshotLocked(), nil
}

func (w *Watcher) snapshotLocked() Snapshot {
	s := w.snap
	s.Rows = append([]Row(nil), s.Rows...)
	s.Totals = append([]Point(nil), s.Totals...)
	return s
}

// update folds a List result read at now into the tracks; w.mu is held.
func (w *Watcher) update(infos []dlock.LockInfo, now time.Time) {
	seen := make(map[string]bool, len(infos))
	var totAcq float64
	totWait, held, unknown := 0, 0, 0
	var delays map[string]time.Duration // the free locks in their lock-delay
	for _, info := range infos {
		if !info.Held {
			if info.DelayLeft > 0 {
				if delays == nil {
					delays = map[string]time.Duration{}
				}
				delays[info.Key] = info.DelayLeft
				if w.tracks[info.Key] == nil {
					w.tracks[info.Key] = &track{lastSeen: now}
				}
			}
			continue
		}
		seen[info.Key] = true
		tr := w.tracks[info.Key]
		if tr == nil {
			tr = &track{}
			w.tracks[info.Key] = tr
		}
		n := tr.observe(info, now)
		totAcq += n
		if info.Waiters < 0 {
			unknown++
		}
		totWait += max(info.Waiters, 0)
		held++
		heldFor := now.Sub(tr.since(now))
		tr.hist.add(now, w.bucket, n, max(info.Waiters, 0), heldFor.Seconds())
	}
	keys := make([]string, 0, len(w.tracks))
	for key, tr := range w.tracks {
		if !seen[key] {
			tr.held = false
			if now.Sub(tr.lastSeen) > max(keepFree, w.opts.History) {
				delete(w.tracks, key)
				continue
			}
			tr.hist.add(now, w.bucket, 0, 0, 0)
		}
		if tr.held || now.Sub(tr.lastSeen) <= keepFree { // else kept for its history only
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	rows := make([]Row, len(keys))
	for i, key := range keys {
		rows[i] = w.tracks[key].row(key, now)
		if d, ok := delays[key]; ok && !rows[i].Held {
			rows[i].DelayMS = max(d.Milliseconds(), 1)
			rows[i].Holder = "in its lock-delay, " + d.Round(time.Millisecond).String() + " left"
			if rows[i].Kind == "lock" && w.opts.DelayedKind != "" {
				rows[i].Kind = w.opts.DelayedKind
			}
		}
	}
	// Held before free, each by key.
	slices.SortStableFunc(rows, func(a, b Row) int {
		switch {
		case a.Held == b.Held:
			return 0
		case a.Held:
			return -1
		}
		return 1
	})
	w.totals.add(now, w.bucket, totAcq, totWait, float64(held))
	w.snap.Rows, w.snap.Held, w.snap.Waiters, w.snap.WaitersUnknown = rows, held, totWait, unknown
	w.snap.Totals = w.totals.points(now, w.bucket)
}
