package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"

	"github.com/go-zookeeper/zk"
)

// Inspect implements driver.Inspector: it reads the lock named key without
// changing it. A free lock has Held false. The TTL is the holder's TTL counted
// from the last write of its node by the ZooKeeper leader's clock, against this
// host's clock; <0 when past or unknown (a holder that stopped renewing, whose
// node goes with its session). A holder that waited for the lock shows up to a
// third more until its first renewal: the margin its node carries (see the
// package documentation). Waiters counts the nodes queued behind the
// holder. A held lock is exclusive and granted in arrival order (Holders and
// Limit 1, Kind driver.KindFair) and its LastToken is the holder's token; a free lock's LastToken is 0: ZooKeeper keeps no record
// of a released lock.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	info, _, err := d.inspect(ctx, key)
	return info, err
}

// inspect is Inspect, returning the holder's node name too.
func (d *Driver) inspect(ctx context.Context, key string) (driver.LockInfo, string, error) {
	if err := d.checkInspect(ctx, key); err != nil {
		return driver.LockInfo{}, "", err
	}
	lp := d.lockPath(key)
	for round := 0; round < maxRounds; round++ {
		q, marked, err := d.listMarked(ctx, lp)
		if err != nil {
			return driver.LockInfo{}, "", err
		}
		if len(q) == 0 {
			info := driver.LockInfo{Key: key}
			if marked {
				if info.DelayLeft, err = d.delayLeft(ctx, lp, 0); err != nil {
					return info, "", err
				}
			}
			return info, "", nil
		}
		var data []byte
		var st *zk.Stat
		err = d.call(ctx, func() (err error) {
			data, st, err = d.conn.Get(lp + "/" + q[0].name)
			return err
		})
		if isNoNode(err) {
			continue // released meanwhile
		}
		if err != nil {
			return driver.LockInfo{}, "", mapErr(err)
		}
		nd, _ := decodeData(data)
		return driver.LockInfo{Key: key, Held: true, Owner: q[0].owner, Metadata: nd.Metadata,
			Token: uint64(st.Czxid), TTL: remaining(nd, st.Mtime), Waiters: len(q) - 1,
			Holders: 1, Limit: 1, LastToken: uint64(st.Czxid), Kind: driver.KindFair}, q[0].name, nil
	}
	return driver.LockInfo{}, "", changing(key)
}

func changing(key string) error {
	return fmt.Errorf("%w: zklock: the queue of %q kept changing", driver.ErrUnavailable, key)
}

func (d *Driver) checkInspect(ctx context.Context, key string) error {
	if d == nil {
		return fmt.Errorf("%w: nil driver", driver.ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	return driver.ValidateKey(key)
}

// ListPrefix implements driver.Inspector: the held locks whose keys start with
// prefix. It reads every lock node under the root.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if err := d.checkInspect(ctx, "list"); err != nil {
		return nil, err
	}
	var names []string
	err := d.call(ctx, func() (err error) {
		names, _, err = d.conn.Children(d.root)
		return err
	})
	if isNoNode(err) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err)
	}
	var out []driver.LockInfo
	for _, n := range names {
		key, ok := unescape(n)
		if !ok || driver.ValidateKey(key) != nil || !strings.HasPrefix(key, prefix) {
			continue
		}
		info, err := d.Inspect(ctx, key)
		if errors.Is(err, driver.ErrConflict) || (err == nil && !info.Held && info.DelayLeft <= 0) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// ForceUnlock implements driver.Inspector: it deletes the holder's node of the
// lock named key, whoever holds it, and returns what it removed. The holder's
// session is told at once by its watches, and its Lease is lost
// (dlock.LossStoreSignal; at its next renewal if the session missed it), and
// the next waiter takes the lock. It is for operators clearing a lock whose holder is known to
// be gone. The error matches dlock.ErrNotHeld when the lock is free.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	for round := 0; round < maxRounds; round++ {
		info, node, err := d.inspect(ctx, key)
		if err != nil {
			return driver.LockInfo{}, err
		}
		if !info.Held {
			return info, fmt.Errorf("%w: %q is free", driver.ErrNotHeld, key)
		}
		err = d.call(ctx, func() error { return d.conn.Delete(d.lockPath(key)+"/"+node, -1) })
		if isNoNode(err) {
			continue // released meanwhile
		}
		if err != nil {
			return driver.LockInfo{}, mapErr(err)
		}
		return info, nil
	}
	return driver.LockInfo{}, changing(key)
}
