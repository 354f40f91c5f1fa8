// Package dashboard is a live view of the locks of any dlock backend: a Watcher
// that reads a driver.Inspector every interval and keeps, for every lock, what an
// operator looks at first (who holds it, for how long, the TTL left, the waiters,
// how often it changes hands, and marks for a TTL about to run out and for a
// holder that stopped renewing), with a short history for plots; and an
// http.Handler serving that view as one self-contained web page and as JSON,
// which a service can mount on its admin port. The dlock command's "top",
// "list --watch" and "serve" are built on it.
//
// The page and the JSON have no authentication of their own: mount the Handler
// where only operators reach it, and enable force-unlock (Options.AllowUnlock)
// only there.
package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultHistory  = 5 * time.Minute
	MinInterval     = 100 * time.Millisecond

	// historyPoints is how many buckets a history holds (History/historyPoints each).
	historyPoints = 60
	// keepFree is how long a lock stays in the view after it was last seen held.
	keepFree = time.Minute
)

// Options configure a Watcher and a Handler. The zero value watches every lock
// ("*") every second, keeps five minutes of history and refuses force-unlock.
type Options struct {
	// Pattern selects the locks by name (a glob as driver.MatchKey reads it);
	// "" means "*".
	Pattern string

	// Interval is the time between two reads of the locks: DefaultInterval when
	// zero, at least MinInterval.
	Interval time.Duration

	// History is how far back the plots reach: DefaultHistory when zero.
	History time.Duration

	// AllowUnlock lets the Handler force-unlock a lock, on a POST that names the
	// lock and the owner the operator confirmed. Off by default: the page is
	// read-only.
	AllowUnlock bool

	// Title names what is watched on the page ("Redis at 127.0.0.1:6379");
	// may be empty.
	Title string

	// Audit, when set, is called after every force-unlock the Handler made,
	// with the lock as it was removed and the address of the client that asked.
	Audit func(removed Row, remoteAddr string)
}

// Row is one lock as the views show it. Every string that comes from the holder
// (host, user, description, metadata, owner) has gone through Printable.
type Row struct {
	Key  string `json:"key"`
	Held bool   `json:"held"` // false for a lock seen held within the last minute, free now

	// Kind is "mutex", "fair", "reentrant", "read-write", "semaphore N",
	// "exclusive" for an exclusive lock of a backend that does not tell which,
	// or "lock" when nothing tells.
	Kind string `json:"kind"`

	Owner       string `json:"owner,omitempty"`    // the holder's owner token, which a force-unlock confirms
	OwnerID     string `json:"owner_id,omitempty"` // its dlock.WithOwner ID, when one was set
	Host        string `json:"host,omitempty"`     // from metadata written as "dlock run" writes it
	PID         int    `json:"pid,omitempty"`
	User        string `json:"user,omitempty"`
	Description string `json:"description,omitempty"`
	Metadata    string `json:"metadata,omitempty"` // other metadata, escaped
	Holder      string `json:"holder"`             // who holds it, on one line: user@host pid N "description"

	// Since is when the holding began: from the holder's metadata or token when
	// they tell, else when the Watcher first saw it (SinceSeen true).
	Since     time.Time     `json:"since,omitzero"`
	SinceSeen bool          `json:"since_seen,omitempty"`
	HeldFor   time.Duration `json:"-"`

	TTL    time.Duration `json:"-"` // time left; <0 unknown (a session-bound lock)
	TTLMax time.Duration `json:"-"` // the longest TTL seen for this holding: the bar's full length

	Waiters   int    `json:"waiters"` // waiters the store knows of; -1 (driver.WaitersUnknown) when it does not know them
	Holders   int    `json:"holders"`
	Limit     int    `json:"limit"` // 1 exclusive, N a semaphore, 0 shared by readers
	Token     uint64 `json:"token,omitempty"`
	LastToken uint64 `json:"last_token,omitempty"`

	// Rate is the acquisitions per second over the last RateWindow, from the
	// growth of the fencing tokens: where tokens count acquisitions, their
	// growth; where they are clock readings in microseconds (Redis, memlock),
	// a lower bound: one per read that sees a newer token.
	Rate float64 `json:"acq_per_s"`

	// TTLLow marks a TTL close to running out: under a quarter of TTLMax.
	TTLLow bool `json:"ttl_low,omitempty"`

	// Vanished marks a holder that stopped renewing: its TTL has not been
	// extended for more than half of TTLMax (a watchdog renews every third),
	// so the holding is probably left by a process that is gone and will
	// expire.
	Vanished bool `json:"vanished,omitempty"`
}

// MarshalJSON writes the durations in milliseconds (held_ms, ttl_ms, ttl_max_ms;
// ttl_ms is -1 when unknown).
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	ttl := r.TTL.Milliseconds()
	if r.TTL < 0 {
		ttl = -1
	}
	return json.Marshal(struct {
		plain
		HeldMS   int64 `json:"held_ms"`
		TTLMS    int64 `json:"ttl_ms"`
		TTLMaxMS int64 `json:"ttl_max_ms"`
	}{plain(r), r.HeldFor.Milliseconds(), ttl, r.TTLMax.Milliseconds()})
}

// Point is one bucket of a history: the acquisitions per second in it, the most
// waiters seen and the longest time held seen (for the totals: the number of
// locks held).
type Point struct {
	Time    time.Time `json:"t"`
	Rate    float64   `json:"acq_per_s"`
	Waiters int       `json:"waiters"`
	Held    float64   `json:"held_s"`
}

// Snapshot is the state of the watched locks after a refresh.
type Snapshot struct {
	Time     time.Time     `json:"time"`
	Pattern  string        `json:"pattern"`
	Interval time.Duration `json:"-"`
	Took     time.Duration `json:"-"` // how long the last read took
	Err      string        `json:"error,omitempty"`
	Rows     []Row         `json:"locks"` // by key
	Held     int           `json:"held"`
	Waiters  int           `json:"waiters"` // the waiters the store knows of
	Totals   []Point       `json:"totals"`  // acquisitions/s and waiters of all locks, locks held

	// WaitersUnknown counts the held locks whose waiters the store does not
	// know (Row.Waiters -1): Waiters leaves theirs out.
	WaitersUnknown int `json:"waiters_unknown,omitempty"`
}

// RateWindow is the time over which Row.Rate is averaged.
const RateWindow = 10 * time.Second

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

// track is what a Watcher keeps of one lock.
type track struct {
	info      dlock.LockInfo
	held      bool
	owner     string // the holding being watched
	token     uint64
	firstSeen time.Time
	ttlMax    time.Duration
	renewed   time.Time // the last time the TTL grew, or the holding was first seen
	lastTTL   time.Duration
	lastSeen  time.Time // last seen held
	lastTok   uint64    // the newest token seen
	acqs      []acq     // acquisitions seen within RateWindow
	hist      history
	metaRaw   string      // the metadata meta was parsed from
	meta      *holderMeta // parsed once per holding
	who       *Row        // the holder's fields of the row, escaped once per holding
	whoOwner  string      // the owner who describes
}

type acq struct {
	t time.Time
	n float64
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
	for _, info := range infos {
		if !info.Held {
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

// observe records info, read at now, and returns the acquisitions it shows
// since the previous read.
func (tr *track) observe(info dlock.LockInfo, now time.Time) float64 {
	tok := max(info.LastToken, info.Token)
	var n float64
	switch {
	case tr.lastTok == 0 || tok <= tr.lastTok:
	case clockToken(tr.lastTok, now) && clockToken(tok, now):
		n = 1 // tokens are clock readings: at least one acquisition
	default:
		n = float64(tok - tr.lastTok)
	}
	if tok > tr.lastTok {
		tr.lastTok = tok
	}
	if !tr.held || info.Owner != tr.owner || info.Token != tr.token {
		// A new holding (or the first sight of one).
		tr.owner, tr.token = info.Owner, info.Token
		tr.firstSeen, tr.renewed = now, now
		tr.ttlMax, tr.lastTTL = info.TTL, info.TTL
		if tr.held && n == 0 {
			n = 1 // the holder changed between two reads of equal tokens
		}
	}
	if info.TTL > tr.lastTTL+10*time.Millisecond {
		tr.renewed = now
	}
	tr.ttlMax = max(tr.ttlMax, info.TTL)
	tr.lastTTL = info.TTL
	tr.info, tr.held, tr.lastSeen = info, true, now
	if info.Metadata != tr.metaRaw {
		tr.metaRaw, tr.meta = info.Metadata, parseHolder(info.Metadata)
		tr.who = nil
	}
	if info.Owner != tr.whoOwner {
		tr.who, tr.whoOwner = nil, info.Owner
	}
	if n > 0 {
		tr.acqs = append(tr.acqs, acq{now, n})
	}
	i := 0
	for i < len(tr.acqs) && now.Sub(tr.acqs[i].t) > RateWindow {
		i++
	}
	tr.acqs = tr.acqs[i:]
	return n
}

// clockToken reports whether tok looks like a server clock reading in
// microseconds (Redis tokens are never below one): within ten years before now
// and a day after.
func clockToken(tok uint64, now time.Time) bool {
	if tok >= 1<<62 {
		return false
	}
	t := time.UnixMicro(int64(tok))
	return t.After(now.AddDate(-10, 0, 0)) && t.Before(now.Add(24*time.Hour))
}

// since returns when the current holding began, as well as the track knows.
func (tr *track) since(now time.Time) time.Time {
	if m := tr.meta; m != nil && !m.Since.IsZero() && !m.Since.After(now) {
		return acquiredAt(m.Since, tr.info.Token, now)
	}
	return tr.firstSeen
}

// acquiredAt refines the time since (written by the holder before it began to
// wait) with the token when that is a plausible clock reading of the
// acquisition.
func acquiredAt(since time.Time, token uint64, now time.Time) time.Time {
	if clockToken(token, now) {
		at := time.UnixMicro(int64(token))
		if !at.Before(since.Add(-time.Minute)) && !at.After(now) {
			return at
		}
	}
	return since
}

// holderMeta is the metadata "dlock run" writes with its lock (JSON).
type holderMeta struct {
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	User        string    `json:"user"`
	Since       time.Time `json:"since"`
	Description string    `json:"description"`
}

// parseHolder reads metadata written as dlock run writes it, or returns nil.
func parseHolder(raw string) *holderMeta {
	if !strings.HasPrefix(raw, "{") {
		return nil
	}
	var m holderMeta
	if json.Unmarshal([]byte(raw), &m) != nil || m.Since.IsZero() && m.Host == "" && m.PID == 0 {
		return nil
	}
	return &m
}

// row is the view of the track at now.
func (tr *track) row(key string, now time.Time) Row {
	info := tr.info
	if info.Held && info.Holders == 0 {
		// A backend that does not count holders (redlock) has exclusive
		// locks only.
		info.Holders, info.Limit = 1, 1
	}
	r := Row{Key: Printable(key), Held: tr.held, Kind: kindOf(info), Waiters: info.Waiters,
		Holders: info.Holders, Limit: info.Limit, Token: info.Token, LastToken: max(info.LastToken, tr.lastTok)}
	var n float64
	for _, a := range tr.acqs {
		if now.Sub(a.t) <= RateWindow {
			n += a.n
		}
	}
	r.Rate = n / RateWindow.Seconds()
	if !tr.held {
		r.Waiters, r.Holders, r.Token = min(r.Waiters, 0), 0, 0 // unknown stays unknown
		r.Holder = "free"
		return r
	}
	if tr.who == nil {
		who := Row{Owner: Printable(info.Owner)}
		if id, _ := driver.SplitOwner(info.Owner); id != info.Owner {
			who.OwnerID = Printable(id)
		}
		if m := tr.meta; m != nil {
			who.Host, who.PID, who.User, who.Description = Printable(m.Host), m.PID, Printable(m.User), Printable(m.Description)
		} else {
			who.Metadata = Printable(info.Metadata)
		}
		who.Holder = holderLine(who)
		tr.who = &who
	}
	r.Owner, r.OwnerID, r.Host, r.PID, r.User, r.Description, r.Metadata, r.Holder =
		tr.who.Owner, tr.who.OwnerID, tr.who.Host, tr.who.PID, tr.who.User, tr.who.Description, tr.who.Metadata, tr.who.Holder
	r.Since = tr.since(now)
	r.SinceSeen = r.Since.Equal(tr.firstSeen)
	r.HeldFor = max(now.Sub(r.Since), 0)
	r.TTL, r.TTLMax = info.TTL, tr.ttlMax
	if info.TTL >= 0 && tr.ttlMax > 0 {
		// The TTL read then, less the time since (it is read once per refresh).
		r.TTLLow = info.TTL < tr.ttlMax/4
		r.Vanished = now.Sub(tr.renewed) > tr.ttlMax/2 && info.TTL < tr.ttlMax/2
	}
	return r
}

// holderLine says who holds the lock of r on one line, from escaped fields.
func holderLine(r Row) string {
	var parts []string
	who := r.Host
	if r.User != "" {
		who = r.User + "@" + who
	}
	if who != "" {
		parts = append(parts, who)
	}
	if r.PID != 0 {
		parts = append(parts, "pid "+strconv.Itoa(r.PID))
	}
	if r.Description != "" {
		parts = append(parts, `"`+r.Description+`"`)
	}
	if r.Metadata != "" {
		parts = append(parts, `"`+r.Metadata+`"`)
	}
	if r.OwnerID != "" && r.Host == "" {
		parts = append([]string{r.OwnerID}, parts...)
	}
	if len(parts) == 0 {
		return "an unnamed holder"
	}
	return strings.Join(parts, " ")
}

// kindOf names the kind of lock info describes.
func kindOf(info dlock.LockInfo) string {
	switch {
	case info.Kind == driver.KindSemaphore || info.Kind == "" && info.Limit > 1:
		return "semaphore " + strconv.Itoa(info.Limit)
	case info.Kind == "" && info.Held && info.Limit == 0 && info.Holders > 0:
		return driver.KindReadWrite
	case info.Kind == "" && info.Limit == 1:
		return "exclusive" // a mutex or a fair lock: the backend does not say
	case info.Kind == "":
		return "lock"
	}
	return info.Kind
}

// history is a ring of buckets of one lock (or of the totals).
type history struct {
	b []bucket
}

type bucket struct {
	id      int64 // the bucket's start time / width; 0 unused
	acqs    float32
	waiters int32
	held    float32
}

func (h *history) add(now time.Time, width time.Duration, acqs float64, waiters int, held float64) {
	if h.b == nil {
		h.b = make([]bucket, historyPoints)
	}
	id := now.UnixNano() / int64(width)
	b := &h.b[id%historyPoints]
	if b.id != id {
		*b = bucket{id: id}
	}
	b.acqs += float32(acqs)
	b.waiters = max(b.waiters, int32(min(waiters, 1<<30)))
	b.held = max(b.held, float32(held))
}

// points returns the buckets of the last historyPoints widths up to now, oldest
// first; empty buckets are zero points, and none at all is an empty slice.
// For the totals (sum) a bucket's held is the locks held, else the longest time.
func (h *history) points(now time.Time, width time.Duration) []Point {
	out := make([]Point, 0, historyPoints)
	if h.b == nil {
		return out
	}
	last := now.UnixNano() / int64(width)
	for id := last - historyPoints + 1; id <= last; id++ {
		if id < 0 {
			continue
		}
		p := Point{Time: time.Unix(0, id*int64(width))}
		if b := h.b[id%historyPoints]; b.id == id {
			span := width
			if id == last {
				span = max(now.Sub(p.Time), width/10)
			}
			p.Rate = float64(b.acqs) / span.Seconds()
			p.Waiters = int(b.waiters)
			p.Held = float64(b.held)
		}
		out = append(out, p)
	}
	return out
}

// SortBy names an order of rows.
type SortBy string

// The orders of Sort.
const (
	SortKey     SortBy = "key"     // by name
	SortWaiters SortBy = "waiters" // most waiters first
	SortAge     SortBy = "age"     // held longest first
	SortChurn   SortBy = "churn"   // most acquisitions per second first
)

// ParseSortBy reads the name of an order; the error matches dlock.ErrInvalid.
func ParseSortBy(s string) (SortBy, error) {
	switch by := SortBy(s); by {
	case SortKey, SortWaiters, SortAge, SortChurn:
		return by, nil
	}
	return "", fmt.Errorf("%w: unknown order %q (key, waiters, age or churn)", dlock.ErrInvalid, s)
}

// Sort orders rows by by, held locks before free ones, ties by key.
func Sort(rows []Row, by SortBy) {
	less := func(a, b Row) int {
		if a.Held != b.Held {
			if a.Held {
				return -1
			}
			return 1
		}
		switch by {
		case SortWaiters:
			if a.Waiters != b.Waiters {
				return b.Waiters - a.Waiters
			}
		case SortAge:
			if a.HeldFor != b.HeldFor {
				return cmpDesc(a.HeldFor, b.HeldFor)
			}
		case SortChurn:
			if a.Rate != b.Rate {
				return cmpDesc(a.Rate, b.Rate)
			}
		}
		return strings.Compare(a.Key, b.Key)
	}
	slices.SortFunc(rows, less)
}

func cmpDesc[T time.Duration | float64](a, b T) int {
	if a > b {
		return -1
	}
	return 1
}
