package etcdlock

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/glob"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Inspect reads the lock named key without changing it: its holder, the holder's
// fencing token, metadata and lease time left, and the number of waiters queued
// behind it. It returns an error matching dlock.ErrNotHeld when nobody holds the
// lock, dlock.ErrInvalid for a bad key, and dlock.ErrConflict when the oldest
// entry was not written by dlock.
func (d *Driver) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if err := checkArgs(ctx, key); err != nil {
		return LockInfo{}, err
	}
	resp, err := d.cli.Get(ctx, QueuePrefix(key), clientv3.WithFirstCreate()...)
	if err != nil {
		return LockInfo{}, mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return LockInfo{}, fmt.Errorf("%w: %q is free", dlock.ErrNotHeld, key)
	}
	if foreign(resp.Kvs[0]) {
		return LockInfo{}, conflict(key, resp.Kvs[0])
	}
	return d.info(ctx, key, resp.Kvs[0], int(resp.Count)-1), nil
}

// info describes the holder entry kv of the lock named key.
func (d *Driver) info(ctx context.Context, key string, kv *mvccpb.KeyValue, waiters int) LockInfo {
	return LockInfo{
		Key:      key,
		Owner:    strings.TrimPrefix(string(kv.Key), QueuePrefix(key)),
		Metadata: string(kv.Value),
		Token:    uint64(kv.CreateRevision),
		TTL:      d.remaining(ctx, []*mvccpb.KeyValue{kv}),
		Waiters:  waiters,
	}
}

// List returns the locks held now whose names match pattern, sorted by name.
// pattern is a glob over lock names, as for the Redis backend: '*' matches any
// run of characters ('/' included), '?' any one character, "[...]" one of a set,
// and '\' makes the next character literal. Locks whose oldest entry was not
// written by dlock are skipped. The error matches dlock.ErrInvalid for a bad
// pattern (empty, too long, not UTF-8, or with control characters, '{' or '}').
func (d *Driver) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	if err := glob.Validate(pattern); err != nil {
		return nil, err
	}
	// Every entry: the holder of each lock is its oldest, and the others count
	// as its waiters. Keys sort by lock name, since the name is closed by '}'.
	start := Prefix + "{"
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
		if !ok || !glob.Match(pattern, name) {
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
	sort.Strings(names)
	infos := make([]LockInfo, 0, len(names))
	for _, name := range names {
		l := locks[name]
		if foreign(l.holder) {
			continue
		}
		infos = append(infos, d.info(ctx, name, l.holder, l.n-1))
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
	if !ok || owner == "" || dlock.ValidateKey(name) != nil {
		return "", false
	}
	return name, true
}

// forceAttempts bounds how often ForceUnlock reads again a lock that changed
// hands between its read and its removal.
const forceAttempts = 3

// ForceUnlock removes the holder of the lock named key, whoever it is, and
// revokes its lease: the holder learns of the loss at its next renewal, and the
// next waiter (if any) takes the lock. It is an administrator's tool. The
// removal is checked against the holder just read (its create revision), so a
// lock that changed hands meanwhile is read again rather than removed unseen.
// It returns an error matching dlock.ErrNotHeld when the lock is free.
func (d *Driver) ForceUnlock(ctx context.Context, key string) error {
	for i := 0; i < forceAttempts; i++ {
		if err := checkArgs(ctx, key); err != nil {
			return err
		}
		resp, err := d.cli.Get(ctx, QueuePrefix(key), clientv3.WithFirstCreate()...)
		if err != nil {
			return mapErr(err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%w: %q is free", dlock.ErrNotHeld, key)
		}
		kv := resp.Kvs[0]
		if foreign(kv) {
			return conflict(key, kv)
		}
		h := newHolding(string(kv.Key), kv.CreateRevision, clientv3.LeaseID(kv.Lease), 0)
		removed, err := d.remove(ctx, h)
		if err != nil || removed {
			return err
		}
	}
	return fmt.Errorf("%w: %q changed hands %d times while being removed", dlock.ErrNotHeld, key, forceAttempts)
}

func checkArgs(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	return dlock.ValidateKey(key)
}
