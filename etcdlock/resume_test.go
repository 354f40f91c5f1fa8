package etcdlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestResumedLeaseIsToldAtOnce: a holding taken up by another Driver with
// Resume is registered with that Driver's loss watch as a grant is: a
// force-unlock reaches the resumed lease at once.
func TestResumedLeaseIsToldAtOnce(t *testing.T) {
	from := newClient(t)
	to, watched := watchedClient(t)
	took := dlocktest.PushedLoss(t, dlocktest.Resumed(from, to), dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		watched()
		start := time.Now()
		_, err := from.ForceUnlock(ctx, l.Key())
		return start, err
	})
	t.Logf("ForceUnlock to Done: %v", took)
}

// TestResumedByItsOwnDriver: a holding detached and resumed by the same
// Driver stays on the same shared lease; the Driver's sweep, which removes
// entries past their own deadline before it renews that lease, leaves it
// alone after the detached lease's deadline has passed.
func TestResumedByItsOwnDriver(t *testing.T) {
	d := newDriver(t)
	c, err := NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Second), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	old := l.Deadline()
	ref, err := l.Detach()
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Resume(ctx, ref)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	// Wait for a renewal of the shared lease that starts after the detached
	// lease's deadline: its sweep has passed the entry by then.
	sl := d.class(1)
	for {
		sl.mu.Lock()
		renewed := sl.renewed
		sl.mu.Unlock()
		if renewed.After(old) {
			break
		}
		select {
		case <-r.Done():
			t.Fatalf("resumed lease lost: %v", r.Err())
		case <-ctx.Done():
			t.Fatal("the shared lease was not renewed past the detached lease's deadline")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := r.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend after the old deadline: %v (lease Err %v)", err, r.Err())
	}
	if _, err := newClient(t).TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of the resumed lock: %v, want ErrNotObtained", err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// TestResumedLeaseReleasesItsLockDelay: a holding taken with a lock-delay
// and resumed elsewhere deletes its delay marker with its entry when it is
// released, as the acquirer would have: the next TryLock is granted at once.
func TestResumedLeaseReleasesItsLockDelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	l, err := newClient(t).TryLock(ctx, key, dlock.WithLockDelay(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := l.Detach()
	if err != nil {
		t.Fatal(err)
	}
	r, err := newClient(t).Resume(ctx, ref)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	n, err := newClient(t).TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the resumed lease's release: %v, want the lock (no delay after a release)", err)
	}
	if err := n.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestResumeOfAWaiterIsNotHeld: a reference that names a waiter's entry (its
// owner and create revision, as a forger who read the queue would write it)
// resumes nothing, and leaves the entry as it was: only the first entry of
// the queue holds.
func TestResumeOfAWaiterIsNotHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	l, err := newClient(t).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := newClient(t).Lock(wctx, key)
		waited <- err
	}()
	cli := newEtcd(t)
	var waiter *mvccpb.KeyValue
	testserver.Eventually(t, 10*time.Second, "the waiter's entry", func() bool {
		resp, err := cli.Get(ctx, QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil || len(resp.Kvs) != 2 {
			return false
		}
		waiter = resp.Kvs[1]
		return true
	})
	ref, err := l.Detach()
	if err != nil {
		t.Fatal(err)
	}
	r, err := driver.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	r.Owner = strings.TrimPrefix(string(waiter.Key), QueuePrefix(key))
	r.Token = uint64(waiter.CreateRevision)
	c := newClient(t)
	if _, err := c.Resume(ctx, r.String()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Resume of a waiter's entry: %v, want ErrNotHeld", err)
	}
	resp, err := cli.Get(ctx, string(waiter.Key))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != waiter.ModRevision || resp.Kvs[0].Lease != waiter.Lease {
		t.Fatalf("the waiter's entry after a refused Resume: %v, %v; want it untouched (%v)", resp, err, waiter)
	}
	stop()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's Lock: %v, want context.Canceled", err)
	}
	h, err := c.Resume(ctx, ref)
	if err != nil {
		t.Fatalf("Resume of the holding: %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestResumeWithALostReply: a Resume whose reply is lost may have moved the
// entry to its Driver's shared lease all the same; the holding still ends at
// the deadline that Resume would have given it, though the Driver goes on
// renewing that lease for its other locks.
func TestResumeWithALostReply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	l, err := newClient(t).TryLock(ctx, key, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := l.Detach()
	if err != nil {
		t.Fatal(err)
	}
	proxy := testproxy.Start(t, srv.Addr)
	d, err := NewDriver(newEtcd(t, proxy.Addr), WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewClient(d, dlock.WithTTL(time.Second), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	obs := newEtcd(t)
	// The Driver's shared lease of one second, renewed for another lock
	// throughout.
	keep, err := b.TryLock(ctx, key+"-kept")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = keep.Unlock(ctx) }()
	var moved *mvccpb.KeyValue
	for range 5 {
		proxy.Blackhole(testproxy.Downstream, true)
		_, err := b.Resume(ctx, ref)
		proxy.Blackhole(testproxy.Downstream, false)
		proxy.Reset()
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("Resume without its reply: %v, want ErrUnavailable", err)
		}
		kv, _ := entryKV(t, obs, key, l.Owner())
		if kv.Lease == int64(d.class(1).leaseID()) {
			moved = kv
			break
		}
	}
	if moved == nil {
		t.Skip("no Resume reached the server in 5 tries")
	}
	gone := deletion(t, obs, EntryKey(key, l.Owner()), moved.ModRevision+1)
	del := awaitDeletion(t, gone, 10*time.Second)
	t.Logf("the moved entry deleted at revision %d", del.rev)
	if keep.Err() != nil {
		t.Logf("the other lock's lease ended meanwhile: %v", keep.Err())
	}
}
