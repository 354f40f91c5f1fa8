package natslock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

var (
	_ driver.Resumer = (*Driver)(nil)
	_ driver.Resumer = (*FairDriver)(nil)
	_ driver.Resumer = (*SemaphoreDriver)(nil)
)

// Resume implements driver.Resumer: a read of the key's last message, and
// when it is h.Owner's holding with token, the holder's value published again
// with h.TTL, on the condition that the key's last message is still the one
// read (as Extend's renewal is). The holding is then watched for its loss as
// a grant is. It returns an error matching dlock.ErrNotHeld, and writes
// nothing, when the key is free or names another owner or token.
func (d *Driver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	ep := d.epoch()
	rec, rev, err := d.holding(ctx, h.Key)
	if err != nil {
		return driver.Grant{}, err
	}
	if rec == nil || rec.Owner != h.Owner || rec.Token != token {
		return driver.Grant{}, notHeld(h.Key)
	}
	hd := &hold{token: token, rev: rev, epoch: ep, meta: rec.Meta}
	if _, err := d.extend(ctx, h.Key, h.Owner, hd, h.TTL); err != nil {
		return driver.Grant{}, err
	}
	d.forget(h.Key)
	return d.grantHold(h.Key, h.Owner, hd), nil
}

// Resume implements driver.Resumer. A reference names no queue entry's id:
// the Driver's watch of the key's queue (the one its acquisitions and
// holders use, which Resume starts when there is none, and waits for)
// finds h.Owner's entry with token among the holders (first, or among the
// first n of a semaphore of n permits); when the watch does not show it
// there (it may lag behind the bucket), a listing of the queue and a read
// of each entry decide. The entry is then written again with h.TTL, on the
// condition that its last revision is the one seen (as Extend's renewal
// is), and watched for its loss as a grant is. It returns an error matching
// dlock.ErrNotHeld, and writes nothing, when no live entry of the queue has
// that owner and token, or when it waits behind the holders.
func (f *FairDriver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	d := f.drv()
	b, err := d.open(ctx, h.Key)
	if err != nil {
		return driver.Grant{}, err
	}
	kw, w, leave := d.awaitQueue(h.Key)
	defer leave()
	if err := d.queueReady(ctx, kw, w); err != nil {
		return driver.Grant{}, err
	}
	d.mu.Lock()
	id, en, live := kw.find(h.Owner, token)
	ahead, _, foreign, other := kw.standing(token, d.permits)
	d.mu.Unlock()
	if foreign || other != 0 {
		return driver.Grant{}, d.queueConflict(h.Key, other)
	}
	hd := &hold{sub: id, token: token, rev: en.rev, meta: en.meta}
	if !live || ahead >= d.permits {
		// The bucket's word: the watch may not have delivered the
		// entry, or the end of an older one, yet.
		q, err := d.readQueue(ctx, b, h.Key)
		if err != nil {
			return driver.Grant{}, err
		}
		hd, ahead = nil, 0
		for _, e := range q {
			switch {
			case e.rec.Owner == h.Owner && e.rec.Token == token:
				hd = &hold{sub: e.id, token: token, rev: e.m.Sequence, meta: e.rec.Meta}
			case e.rec.Token < token:
				ahead++
			}
		}
		if hd == nil || ahead >= d.permits {
			return driver.Grant{}, notHeld(h.Key)
		}
	}
	if _, err := d.extend(ctx, h.Key+"."+hd.sub, h.Owner, hd, h.TTL); err != nil {
		return driver.Grant{}, err
	}
	return d.grantHold(h.Key, h.Owner, hd), nil
}

// queueReady waits, for at most the request timeout, until the watch kw has
// delivered the entries of the queue that existed when it started; w is a
// waiter of it.
func (d *Driver) queueReady(ctx context.Context, kw *keyWatch, w *waiter) error {
	timer := time.NewTimer(d.cfg.requestTimeout)
	defer timer.Stop()
	for {
		d.mu.Lock()
		ready := kw.ready
		d.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case _, ok := <-w.wake:
			if !ok {
				return errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: the watch of %q broke", kw.key))
			}
		case <-timer.C:
			return errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: the watch of %q did not deliver the queue in %v", kw.key, d.cfg.requestTimeout))
		case <-ctx.Done():
			return fmt.Errorf("natslock: resume: %w", ctx.Err())
		}
	}
}

// find returns the id and the entry of the queue's live entry of owner with
// token; d.mu is held.
func (kw *keyWatch) find(owner string, token uint64) (string, entry, bool) {
	for id, en := range kw.queue {
		if en.owner == owner && en.token == token && !en.foreign {
			return id, en, true
		}
	}
	return "", entry{}, false
}
