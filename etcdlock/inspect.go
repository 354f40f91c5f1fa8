package etcdlock

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Inspect implements driver.Inspector: it reads the lock named key without
// changing it: its holder (the oldest entry), the holder's fencing token,
// metadata and lease time left (whole seconds, rounded down), and the number of
// waiters queued behind it. A held lock is exclusive and granted in arrival
// order (Kind driver.KindFair): Holders and Limit are 1, and LastToken is the
// holder's token (etcd keeps none for a free lock). A free lock is not an
// error: the result has Held false. The error matches dlock.ErrInvalid for a
// bad key and dlock.ErrConflict when the oldest entry was not written by dlock.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if err := checkArgs(ctx, key); err != nil {
		return driver.LockInfo{}, err
	}
	tr, err := d.cli.Txn(ctx).Then(clientv3.OpGet(QueuePrefix(key), clientv3.WithFirstCreate()...), clientv3.OpGet(DelayKey(key))).Commit()
	if err != nil {
		return driver.LockInfo{}, mapErr(err)
	}
	resp, marker := tr.Responses[0].GetResponseRange(), markerOf(tr.Responses[1])
	if len(resp.Kvs) == 0 {
		info := driver.LockInfo{Key: key}
		if marker != nil {
			info.DelayLeft = d.delayLeft(ctx, marker, 0)
		}
		return info, nil
	}
	if foreign(resp.Kvs[0]) {
		return driver.LockInfo{Key: key}, conflict(key, resp.Kvs[0])
	}
	return d.info(ctx, key, resp.Kvs[0], int(resp.Count)-1), nil
}

// info describes the holder entry kv of the lock named key.
func (d *Driver) info(ctx context.Context, key string, kv *mvccpb.KeyValue, waiters int) driver.LockInfo {
	return driver.LockInfo{
		Key:      key,
		Held:     true,
		Owner:    strings.TrimPrefix(string(kv.Key), QueuePrefix(key)),
		Metadata: string(kv.Value),
		Token:    uint64(kv.CreateRevision),
		TTL:      d.remaining(ctx, kv),
		Waiters:  waiters,
		// Exclusive, and the holder's token is the newest handed out (the
		// waiters' entries get theirs when they take the lock).
		Holders:   1,
		Limit:     1,
		LastToken: uint64(kv.CreateRevision),
		Kind:      driver.KindFair, // entries take the lock in creation order
	}
}

// ListPrefix implements driver.Inspector: it returns the locks held now whose
// names start with prefix, read in one range request. Locks whose oldest entry
// was not written by dlock are skipped.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	// Every entry of the locks whose names start with prefix: the holder of
	// each lock is its oldest, and the others count as its waiters. Keys sort
	// by lock name, since the name is closed by '}'.
	start := Prefix + "{" + prefix
	resp, err := d.cli.Get(ctx, start, clientv3.WithRange(clientv3.GetPrefixRangeEnd(start)))
	if err != nil {
		return nil, mapErr(err)
	}
	type lock struct {
		holder *mvccpb.KeyValue
		n      int
	}
	locks := map[string]*lock{}
	var names []string
	for _, kv := range resp.Kvs {
		name, ok := lockName(string(kv.Key))
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		l := locks[name]
		if l == nil {
			l = &lock{}
			locks[name] = l
			names = append(names, name)
		}
		l.n++
		if l.holder == nil || kv.CreateRevision < l.holder.CreateRevision {
			l.holder = kv
		}
	}
	infos := make([]driver.LockInfo, 0, len(names))
	for _, name := range names {
		l := locks[name]
		if foreign(l.holder) {
			continue
		}
		infos = append(infos, d.info(ctx, name, l.holder, l.n-1))
	}
	// The free locks in their lock-delay.
	ds := Prefix + "delay/{"
	mresp, err := d.cli.Get(ctx, ds+prefix, clientv3.WithRange(clientv3.GetPrefixRangeEnd(ds)))
	if err != nil {
		return nil, mapErr(err)
	}
	for _, m := range mresp.Kvs {
		name, ok := strings.CutSuffix(strings.TrimPrefix(string(m.Key), ds), "}")
		if !ok || locks[name] != nil || driver.ValidateKey(name) != nil || !strings.HasPrefix(name, prefix) {
			continue
		}
		if left := d.delayLeft(ctx, m, 0); left > 0 {
			infos = append(infos, driver.LockInfo{Key: name, DelayLeft: left})
		}
	}
	return infos, nil
}

// lockName returns the lock name of an entry key written by this package.
func lockName(etcdKey string) (string, bool) {
	rest, ok := strings.CutPrefix(etcdKey, Prefix+"{")
	if !ok {
		return "", false
	}
	name, owner, ok := strings.Cut(rest, "}/")
	if !ok || owner == "" || driver.ValidateKey(name) != nil {
		return "", false
	}
	return name, true
}

// forceAttempts bounds how often ForceUnlock reads again a lock that changed
// hands between its read and its removal.
const forceAttempts = 3

// ForceUnlock implements driver.Inspector: it removes the holder of the lock
// named key, whoever it is, and returns what it removed (its lease, shared
// with its holder's other locks, stays). The
// holder's Driver watches the deletions of its entries, and its Lease is lost
// at once (dlock.LossStoreSignal; at its next renewal if the watch was down),
// and the next waiter (if any) takes the lock. It is an administrator's tool. The removal is checked against
// the holder just read (its create revision), so a lock that changed hands
// meanwhile is read again rather than removed unseen. It returns an error
// matching dlock.ErrNotHeld (with Held false) when the lock is free, and
// otherwise as Inspect.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	for i := 0; i < forceAttempts; i++ {
		if err := checkArgs(ctx, key); err != nil {
			return driver.LockInfo{}, err
		}
		resp, err := d.cli.Get(ctx, QueuePrefix(key), clientv3.WithFirstCreate()...)
		if err != nil {
			return driver.LockInfo{}, mapErr(err)
		}
		if len(resp.Kvs) == 0 {
			return driver.LockInfo{Key: key}, fmt.Errorf("%w: %q is free", driver.ErrNotHeld, key)
		}
		kv := resp.Kvs[0]
		if foreign(kv) {
			return driver.LockInfo{Key: key}, conflict(key, kv)
		}
		info := d.info(ctx, key, kv, int(resp.Count)-1)
		removed, err := d.remove(ctx, newQueueEntry(string(kv.Key), kv.CreateRevision, clientv3.LeaseID(kv.Lease), 0))
		if err != nil || removed {
			return info, err
		}
	}
	return driver.LockInfo{Key: key}, fmt.Errorf("%w: %q changed hands %d times while being removed", driver.ErrNotHeld, key, forceAttempts)
}

func checkArgs(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	return driver.ValidateKey(key)
}
