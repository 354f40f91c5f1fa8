package zklock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/go-zookeeper/zk"
)

// delayChild is the name of a lock's lock-delay marker: a persistent child of
// the lock node (which it keeps from being removed as an empty container),
// that a holding with a lock-delay writes when it is granted and deletes with
// its node when it is released. Found by the next acquisition while its
// holding is gone, it says that the holding ended without a release (its node
// expired with its session, was reaped past its TTL, or was forced): the lock
// is then in its delay. ZooKeeper keeps no time per node but its writes'
// mtimes, and an ephemeral node vanishes with its session without a trace, so
// the delay counts from the first time an acquisition saw the marker so (the
// mtime of the write that records it, by the server's clock), which is no
// earlier than the holding's end. A marker left by a crashed holder that no
// acquisition sees stays until one does; once the delay has passed, that
// acquisition deletes it.
const delayChild = "delay"

// MaxLockDelay implements driver.LockDelayer.
func (d *Driver) MaxLockDelay() time.Duration { return driver.MaxLockDelay }

// marker is the data of a lock-delay marker: the token of the holding that
// wrote it, its delay, and whether an acquisition has seen the holding gone
// (the delay then runs from the marker's mtime).
type marker struct {
	token    uint64
	delayMS  int64
	observed bool
}

func (m marker) encode() []byte {
	o := "0"
	if m.observed {
		o = "1"
	}
	return []byte(strconv.FormatUint(m.token, 10) + " " + strconv.FormatInt(m.delayMS, 10) + " " + o)
}

func decodeMarker(b []byte) (marker, bool) {
	f := strings.Fields(string(b))
	if len(f) != 3 || f[2] != "0" && f[2] != "1" {
		return marker{}, false
	}
	tok, err1 := strconv.ParseUint(f[0], 10, 64)
	ms, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || ms < 0 {
		return marker{}, false
	}
	return marker{token: tok, delayMS: ms, observed: f[2] == "1"}, true
}

// gated completes the grant g of w's node, first in the queue of lp, past the
// lock's lock-delay (see gate): while the lock is in its delay, a waiting
// attempt keeps its node (rewritten as a waiter's, so that nobody reaps it)
// and comes back when the delay ends; a TryLock deletes it.
func (d *Driver) gated(ctx context.Context, lp string, w *waiter, g grant, start time.Time, ttl time.Duration, metadata string, waiting, marked bool, delay time.Duration) (grant, error) {
	rem, err := d.gate(ctx, lp, g.token, delay, marked)
	if err != nil {
		return grant{}, err
	}
	if rem <= 0 {
		g.delayed = delay > 0
		return g, nil
	}
	owner := ""
	if c, ok := parseChild(w.node); ok {
		owner = c.owner
	}
	if !waiting {
		if err := d.deleteNode(ctx, lp, owner, w.node); err != nil {
			return grant{}, err
		}
		w.lost()
		return grant{}, d.busy(rem, nil, 0)
	}
	if start.Sub(w.written) >= waiterMargin(ttl)/2 {
		wttl := ttl + waiterMargin(ttl)
		wstart := time.Now()
		var st *zk.Stat
		err := d.call(ctx, func() (err error) {
			st, err = d.conn.Set(lp+"/"+w.node, encodeData(wttl, metadata), -1)
			return err
		})
		if err != nil && !isNoNode(err) {
			return grant{}, mapErr(err)
		}
		if err == nil {
			w.wrote(wstart, wttl, st)
		}
	}
	return grant{}, d.busy(rem, &handle{node: w.node, metadata: metadata, w: w}, min(rem+time.Millisecond, waiterMargin(ttl)/2))
}

// gate is the lock-delay check of an acquisition whose node (token) is first
// in the queue of lp, and marked reports a marker there: a marker of another
// holding is seen (its first sight recorded in it), and the time left of its
// delay returned, or, the delay over, deleted. With delay > 0 the holding
// writes its own marker. It returns 0 when the acquisition may hold the lock.
func (d *Driver) gate(ctx context.Context, lp string, token uint64, delay time.Duration, marked bool) (time.Duration, error) {
	mp := lp + "/" + delayChild
	mine := false
	if marked {
		var data []byte
		var st *zk.Stat
		err := d.call(ctx, func() (err error) {
			data, st, err = d.conn.Get(mp)
			return err
		})
		switch {
		case isNoNode(err):
		case err != nil:
			return 0, mapErr(err)
		default:
			m, ok := decodeMarker(data)
			if !ok {
				return 0, fmt.Errorf("%w: zklock: %s holds %q, not a dlock lock-delay marker", driver.ErrConflict, mp, data)
			}
			if m.token == token {
				mine = true // an earlier attempt of this acquisition wrote it
				break
			}
			began := st.Mtime
			var now int64
			if !m.observed {
				m.observed = true
				err = d.call(ctx, func() (err error) {
					st, err = d.conn.Set(mp, m.encode(), st.Version)
					return err
				})
				if errors.Is(err, zk.ErrBadVersion) || isNoNode(err) {
					return time.Millisecond, nil // seen by another meanwhile: look again
				}
				if err != nil {
					return 0, mapErr(err)
				}
				began, now = st.Mtime, st.Mtime
			} else if now, err = d.serverNow(ctx); err != nil {
				return 0, err
			}
			if left := time.Duration(began+m.delayMS-now) * time.Millisecond; left > 0 {
				return left, nil
			}
			err = d.call(ctx, func() error { return d.conn.Delete(mp, st.Version) })
			if errors.Is(err, zk.ErrBadVersion) {
				return time.Millisecond, nil
			}
			if err != nil && !isNoNode(err) {
				return 0, mapErr(err)
			}
		}
	}
	if delay <= 0 {
		return 0, nil
	}
	data := marker{token: token, delayMS: delay.Milliseconds()}.encode()
	err := d.call(ctx, func() error {
		if !mine {
			_, err := d.conn.Create(mp, data, zk.FlagPersistent, d.acl)
			if !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
		_, err := d.conn.Set(mp, data, -1)
		return err
	})
	return 0, mapErr(err)
}

// serverNow returns the ZooKeeper server's time in ms since the epoch: the
// mtime of an empty write of the clock node.
func (d *Driver) serverNow(ctx context.Context) (int64, error) {
	var st *zk.Stat
	err := d.call(ctx, func() (err error) {
		st, err = d.conn.Set(d.clockPath(), nil, -1)
		return err
	})
	if err != nil {
		return 0, mapErr(err)
	}
	return st.Mtime, nil
}

// releaseDelayed deletes the node of a holding with a lock-delay together
// with its marker, in one transaction, so that no acquisition takes the
// release for an end without one.
func (d *Driver) releaseDelayed(ctx context.Context, lp, owner string, hd *handle) error {
	mp := lp + "/" + delayChild
	var data []byte
	var st *zk.Stat
	err := d.call(ctx, func() (err error) {
		data, st, err = d.conn.Get(mp)
		return err
	})
	if err != nil && !isNoNode(err) {
		return mapErr(err)
	}
	ops := []any{&zk.DeleteRequest{Path: lp + "/" + hd.node, Version: -1}}
	if m, ok := decodeMarker(data); err == nil && ok && m.token == hd.token {
		ops = append(ops, &zk.DeleteRequest{Path: mp, Version: st.Version})
	}
	return d.ownerCall(ctx, lp, owner, func() error {
		_, err := d.conn.Multi(ops...)
		return err
	})
}

// delayLeft returns the time left of the lock-delay of the lock at lp whose
// holder has token holder (0: none), from its marker: the time a marker not
// yet seen would keep the lock, and for one seen, what is left of it by this
// host's clock against the server's mtime. 0 when there is none.
func (d *Driver) delayLeft(ctx context.Context, lp string, holder uint64) (time.Duration, error) {
	var data []byte
	var st *zk.Stat
	err := d.call(ctx, func() (err error) {
		data, st, err = d.conn.Get(lp + "/" + delayChild)
		return err
	})
	if isNoNode(err) {
		return 0, nil
	}
	if err != nil {
		return 0, mapErr(err)
	}
	m, ok := decodeMarker(data)
	if !ok || m.token == holder {
		return 0, nil
	}
	if !m.observed {
		return time.Duration(m.delayMS) * time.Millisecond, nil
	}
	return max(time.Until(time.UnixMilli(st.Mtime+m.delayMS)), 0), nil
}
