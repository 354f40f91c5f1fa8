package dashboard

import (
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/holder"
)

// RateWindow is the time over which Row.Rate is averaged.
const RateWindow = 10 * time.Second

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
	metaRaw   string         // the metadata meta was parsed from
	meta      *holder.Record // parsed once per holding
	who       *Row           // the holder's fields of the row, escaped once per holding
	whoOwner  string         // the owner who describes
}

type acq struct {
	t time.Time
	n float64
}

// observe records info, read at now, and returns the acquisitions it shows
// since the previous read.
func (tr *track) observe(info dlock.LockInfo, now time.Time) float64 {
	tok := max(info.LastToken, info.Token)
	var n float64
	switch {
	case tr.lastTok == 0 || tok <= tr.lastTok:
	case holder.ClockToken(tr.lastTok, now) && holder.ClockToken(tok, now):
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
		tr.metaRaw, tr.meta = info.Metadata, holder.Parse(info.Metadata)
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

// since returns when the current holding began, as well as the track knows.
func (tr *track) since(now time.Time) time.Time {
	if m := tr.meta; m != nil && !m.Since.IsZero() && !m.Since.After(now) {
		return m.AcquiredAt(tr.info.Token, now)
	}
	return tr.firstSeen
}
