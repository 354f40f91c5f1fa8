package dashboard

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

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

	Waiters   int    `json:"waiters"` // waiters the store knows of; -1 (dlock.WaitersUnknown) when it does not know them
	Holders   int    `json:"holders"`
	Limit     int    `json:"limit"` // 1 exclusive, N a semaphore, 0 shared by readers
	Token     uint64 `json:"token,omitempty"`
	LastToken uint64 `json:"last_token,omitempty"`

	// DelayMS, for a free lock, is the time left of its lock-delay in ms (see
	// dlock.WithLockDelay): nobody can take it meanwhile.
	DelayMS int64 `json:"delay_ms,omitempty"`

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
