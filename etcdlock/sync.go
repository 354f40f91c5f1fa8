package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Latches and double barriers (driver.SyncDriver) live under SyncPrefix(name),
// apart from the locks (which List and Inspect read): the latch is one key,
// "n count", on a lease of the latch's TTL that every use renews; the barrier
// is a header key, "n open", on a lease of the party TTL that every arrival
// renews, and one key per party on a lease of its own. A lapsed party's key is
// deleted by etcd, which wakes the watchers; every change is a transaction
// conditioned on the revision of the header (or of the latch) it read.

// SyncPrefix returns the etcd key prefix of the latch and the barrier named
// name.
func SyncPrefix(name string) string { return Prefix + "sync/{" + name + "}/" }

func latchKey(name string) string        { return SyncPrefix(name) + "latch" }
func barrierKey(name string) string      { return SyncPrefix(name) + "barrier" }
func partiesPrefix(name string) string   { return SyncPrefix(name) + "barrier/" }
func partyKey(name, party string) string { return partiesPrefix(name) + party }

// casTries bounds the attempts of one call whose transaction lost a race.
const casTries = 20

var _ driver.SyncDriver = (*Driver)(nil)

// NewLatch returns the latch name over cli, counting down from count and
// forgotten ttl (rounded up to whole seconds) after its last use (see
// dlock.NewLatch). It returns an error matching dlock.ErrInvalid for bad
// arguments; it does no I/O.
func NewLatch(cli *clientv3.Client, name string, count int, ttl time.Duration) (*dlock.Latch, error) {
	d, err := NewDriver(cli)
	if err != nil {
		return nil, err
	}
	return dlock.NewLatch(d, name, count, ttl)
}

// NewBarrier returns a party's handle on the double barrier name over cli, for
// parties parties, each present ttl (whole seconds) after its last renewal (see
// dlock.NewBarrier). It returns an error matching dlock.ErrInvalid for bad
// arguments; it does no I/O.
func NewBarrier(cli *clientv3.Client, name string, parties int, ttl time.Duration) (*dlock.Barrier, error) {
	d, err := NewDriver(cli)
	if err != nil {
		return nil, err
	}
	return dlock.NewBarrier(d, name, parties, ttl)
}

// pair parses "a b" as two non-negative integers.
func pair(kv *mvccpb.KeyValue) (a, b int, ok bool) {
	x, y, found := strings.Cut(string(kv.Value), " ")
	var err1, err2 error
	a, err1 = strconv.Atoi(x)
	b, err2 = strconv.Atoi(y)
	return a, b, found && err1 == nil && err2 == nil && a >= 1 && b >= 0 && kv.Lease != 0
}

func syncForeign(kv *mvccpb.KeyValue) error {
	return fmt.Errorf("%w: etcd key %q is not a dlock latch or barrier", driver.ErrConflict, kv.Key)
}

func syncMismatch(what, name string, stored, n int) error {
	return fmt.Errorf("%w: etcdlock: %s %q made with %d, this one with %d", driver.ErrConflict, what, name, stored, n)
}

// latch reads the latch name: its key (nil when absent), and its count.
func (d *Driver) latch(ctx context.Context, name string, n int) (*mvccpb.KeyValue, int, error) {
	resp, err := d.cli.Get(ctx, latchKey(name))
	if err != nil {
		return nil, 0, mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, n, nil
	}
	kv := resp.Kvs[0]
	cur, count, ok := pair(kv)
	switch {
	case !ok:
		return nil, 0, syncForeign(kv)
	case cur != n:
		return nil, 0, syncMismatch("latch", name, cur, n)
	}
	return kv, count, nil
}

// CountDown implements driver.SyncDriver.
func (d *Driver) CountDown(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	ctx, done := d.request(ctx)
	c, err := d.countDown(ctx, name, n, ttl)
	return c, done(err)
}

func (d *Driver) countDown(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	for range casTries {
		kv, count, err := d.latch(ctx, name, n)
		if err != nil {
			return 0, err
		}
		var lease clientv3.LeaseID
		cmp := clientv3.Compare(clientv3.CreateRevision(latchKey(name)), "=", 0)
		if kv != nil {
			lease = clientv3.LeaseID(kv.Lease)
			if _, err := d.cli.KeepAliveOnce(ctx, lease); err != nil {
				if leaseGone(err) {
					continue // lapsed meanwhile: absent now
				}
				return 0, mapErr(err)
			}
			cmp = clientv3.Compare(clientv3.ModRevision(latchKey(name)), "=", kv.ModRevision)
		} else {
			g, err := d.cli.Grant(ctx, leaseSeconds(ttl))
			if err != nil {
				return 0, mapErr(err)
			}
			lease = g.ID
		}
		left := max(count-1, 0)
		if kv != nil && count == 0 {
			return 0, nil // open already: the keep-alive was the use
		}
		resp, err := d.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(latchKey(name), fmt.Sprintf("%d %d", n, left), clientv3.WithLease(lease))).Commit()
		if err != nil {
			return 0, mapErr(err)
		}
		if resp.Succeeded {
			return left, nil
		}
		if kv == nil {
			_, _ = d.cli.Revoke(ctx, lease)
		}
	}
	return 0, fmt.Errorf("%w: etcdlock: latch %q changed under %d count-downs in a row", driver.ErrUnavailable, name, casTries)
}

// LatchCount implements driver.SyncDriver.
func (d *Driver) LatchCount(ctx context.Context, name string, n int, _ time.Duration) (int, error) {
	ctx, done := d.request(ctx)
	kv, count, err := d.latch(ctx, name, n)
	if err == nil && kv != nil {
		if _, kerr := d.cli.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease)); kerr != nil && !leaseGone(kerr) {
			err = mapErr(kerr)
		}
	}
	return count, done(err)
}

// barrierState is the barrier name as read at one revision.
type barrierState struct {
	head    *mvccpb.KeyValue // nil when absent
	open    bool
	parties map[string]*mvccpb.KeyValue
}

// barrier reads the barrier name.
func (d *Driver) barrier(ctx context.Context, name string, n int) (barrierState, error) {
	resp, err := d.cli.Get(ctx, barrierKey(name), clientv3.WithPrefix())
	if err != nil {
		return barrierState{}, mapErr(err)
	}
	s := barrierState{parties: map[string]*mvccpb.KeyValue{}}
	cur := n
	for _, kv := range resp.Kvs {
		switch k := string(kv.Key); {
		case k == barrierKey(name):
			c, open, ok := pair(kv)
			if !ok || open > 1 {
				return barrierState{}, syncForeign(kv)
			}
			s.head, s.open, cur = kv, open == 1, c
		case strings.HasPrefix(k, partiesPrefix(name)):
			if kv.Lease == 0 {
				return barrierState{}, syncForeign(kv)
			}
			s.parties[strings.TrimPrefix(k, partiesPrefix(name))] = kv
		default:
			return barrierState{}, syncForeign(kv)
		}
	}
	switch {
	case len(s.parties) == 0:
		s.open = false // every party lapsed: shut again, for any n
	case cur != n:
		return barrierState{}, syncMismatch("barrier", name, cur, n)
	}
	return s, nil
}

// headCmp is the condition that the header is as s read it.
func (s barrierState) headCmp(name string) clientv3.Cmp {
	if s.head == nil {
		return clientv3.Compare(clientv3.CreateRevision(barrierKey(name)), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(barrierKey(name)), "=", s.head.ModRevision)
}

// Arrive implements driver.SyncDriver.
func (d *Driver) Arrive(ctx context.Context, name, party string, n int, ttl time.Duration) (bool, error) {
	ctx, done := d.request(ctx)
	open, err := d.arrive(ctx, name, party, n, ttl)
	return open, done(err)
}

func (d *Driver) arrive(ctx context.Context, name, party string, n int, ttl time.Duration) (bool, error) {
	for range casTries {
		s, err := d.barrier(ctx, name, n)
		if err != nil {
			return false, err
		}
		var granted []clientv3.LeaseID
		lease := func(kv *mvccpb.KeyValue) (clientv3.LeaseID, bool, error) {
			if kv != nil {
				if _, err := d.cli.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
					return clientv3.LeaseID(kv.Lease), true, nil
				} else if !leaseGone(err) {
					return 0, false, mapErr(err)
				}
				return 0, false, nil // lapsed meanwhile: read again
			}
			g, err := d.cli.Grant(ctx, leaseSeconds(ttl))
			if err != nil {
				return 0, false, mapErr(err)
			}
			granted = append(granted, g.ID)
			return g.ID, true, nil
		}
		headLease, ok, err := lease(s.head)
		if err != nil || !ok {
			if err != nil {
				return false, err
			}
			continue
		}
		mine := s.parties[party]
		partyLease, ok, err := lease(mine)
		if err != nil || !ok {
			d.revoke(granted)
			if err != nil {
				return false, err
			}
			continue
		}
		present := len(s.parties)
		if mine == nil {
			present++
		}
		open := s.open || present >= n
		flag := 0
		if open {
			flag = 1
		}
		resp, err := d.cli.Txn(ctx).If(s.headCmp(name)).Then(
			clientv3.OpPut(barrierKey(name), fmt.Sprintf("%d %d", n, flag), clientv3.WithLease(headLease)),
			clientv3.OpPut(partyKey(name, party), "", clientv3.WithLease(partyLease)),
		).Commit()
		if err != nil {
			if mine == nil {
				// The transaction may still apply (its context ended
				// with it in flight), after the Withdraw that follows
				// has found nothing to take back: the party would count
				// for its TTL, and open the barrier to one party short.
				// Its new lease revoked, it applies before and its key
				// goes with the lease, or after and fails on the lease.
				d.revoke([]clientv3.LeaseID{partyLease})
			}
			return false, mapErr(err)
		}
		if resp.Succeeded {
			return open, nil
		}
		d.revoke(granted)
	}
	return false, fmt.Errorf("%w: etcdlock: barrier %q changed under %d arrivals in a row", driver.ErrUnavailable, name, casTries)
}

// revoke ends leases granted for a transaction that did not apply.
func (d *Driver) revoke(ids []clientv3.LeaseID) {
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
		_, _ = d.cli.Revoke(ctx, id)
		cancel()
	}
}

// Withdraw implements driver.SyncDriver.
func (d *Driver) Withdraw(ctx context.Context, name, party string, n int) (bool, error) {
	ctx, done := d.request(ctx)
	open, err := d.leave(ctx, name, party, n, true)
	return open, done(err)
}

// Depart implements driver.SyncDriver. A lapsed party's key is deleted by
// etcd, which wakes the watchers: no lapse time is needed.
func (d *Driver) Depart(ctx context.Context, name, party string, n int) (int, time.Duration, error) {
	ctx, done := d.request(ctx)
	var present int
	_, err := d.leave(ctx, name, party, n, false, &present)
	return present, 0, done(err)
}

// leave removes party (unless withdrawing from an open barrier) and the
// header with the last party, reporting whether the barrier is open and,
// through present, the parties left.
func (d *Driver) leave(ctx context.Context, name, party string, n int, withdraw bool, present ...*int) (bool, error) {
	for range casTries {
		s, err := d.barrier(ctx, name, n)
		if err != nil {
			return false, err
		}
		if withdraw && s.open {
			return true, nil
		}
		left := len(s.parties)
		mine := s.parties[party]
		if mine != nil {
			left--
		}
		if len(present) > 0 {
			*present[0] = left
		}
		if mine == nil && (left > 0 || s.head == nil) {
			return s.open, nil
		}
		var ops []clientv3.Op
		if mine != nil {
			ops = append(ops, clientv3.OpDelete(partyKey(name, party)))
		}
		if left == 0 && s.head != nil {
			ops = append(ops, clientv3.OpDelete(barrierKey(name)))
		}
		resp, err := d.cli.Txn(ctx).If(s.headCmp(name)).Then(ops...).Commit()
		if err != nil {
			return false, mapErr(err)
		}
		if resp.Succeeded {
			if mine != nil {
				d.revoke([]clientv3.LeaseID{clientv3.LeaseID(mine.Lease)})
			}
			return s.open, nil
		}
	}
	return false, fmt.Errorf("%w: etcdlock: barrier %q changed under %d departures in a row", driver.ErrUnavailable, name, casTries)
}

// WatchSync implements driver.SyncDriver with an etcd watch on the name's keys:
// every change wakes the waiter (a lapsed party's key is deleted by etcd, a
// change too). A watch that ends (compaction, a closed client) closes the
// channel, and the waiter polls.
func (d *Driver) WatchSync(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := d.cli.Watch(wctx, SyncPrefix(name), clientv3.WithPrefix())
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(wake)
		for resp := range wch {
			if resp.Canceled {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}
