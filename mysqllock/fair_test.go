package mysqllock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// newFair returns a Client of fair locks over a *sql.DB of its own, with the
// driver options dopts, and its driver.
func newFair(t testing.TB, dopts []Option, opts ...dlock.Option) (*Client, *FairDriver) {
	t.Helper()
	f, err := NewFairDriver(newDB(t), dopts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

// TestFairConformance runs the suite on fair locks whose waiters are woken,
// and on fair locks whose waiters poll.
func TestFairConformance(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dopts []Option
	}{{"Woken", nil}, {"Polling", []Option{WithPolling()}}} {
		t.Run(tc.name, func(t *testing.T) {
			dlocktest.Run(t, dlocktest.Backend{
				Info: driver.DriverInfo{Backend: "mysqllock", Kind: driver.KindFair},
				New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
					c, _ := newFair(t, tc.dopts, opts...)
					return c
				},
				Skip: conformanceSkips,
			})
		})
	}
}

// Waiters of several Drivers get the lock in the order they queued, each
// woken by the release before it (well within WakeBackstop); waiters that
// leave or die are out of the way.
func TestFair(t *testing.T) {
	dlocktest.RunFair(t, dlocktest.FairBackend{
		New: func(t testing.TB, opts ...dlock.Option) (dlock.Locker, dlocktest.FairDriver) {
			return newFair(t, nil, opts...)
		},
		WaiterTTL: FairWaiterTTL,
		HandOver:  WakeBackstop,
	})
}

// A fair lock and a plain lock of the same key are one lock: each excludes
// the other, and their tokens are one sequence.
func TestFairAndPlainLocksShareTheKey(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	fair, _ := newFair(t, nil)
	plain := newClient(t)
	var last uint64
	for i, c := range []*Client{fair, plain, fair, plain} {
		other := []*Client{plain, fair}[i%2]
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock %d of the other kind while the key is held: %v", i, err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A force-unlock of a fair lock tells its holder at once, and its queue's
// head takes it.
func TestFairForceUnlock(t *testing.T) {
	_, f := newFair(t, nil)
	c, err := dlock.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		start := time.Now()
		info, err := f.ForceUnlock(ctx, l.Key())
		if err == nil && (info.Kind != driver.KindFair || info.Owner != l.Owner()) {
			t.Errorf("ForceUnlock freed %+v", info)
		}
		return start, err
	})
	t.Logf("ForceUnlock to Done: %v", took)

	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := c.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := newFair(t, nil)
	got := make(chan error, 1)
	go func() {
		lease, err := w.Lock(ctx, key, dlock.WithWait(20*time.Second))
		if err == nil {
			_ = lease.Unlock(ctx)
		}
		got <- err
	}()
	dlocktest.Queued(t, f, key, 1)
	if _, err := f.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the head after a force-unlock: %v", err)
	}
	<-l.Done()
}

// An abandoned fair acquisition cannot queue again nor take the key, and a
// waiter that leaves the head of the queue of a free key wakes the next.
func TestFairAbandonedAcquisitionCannotQueue(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	_, f := newFair(t, nil)
	key := dlocktest.Key(t)
	holder := driver.AcquireRequest{Key: key, Owner: "holder0123456789", TTL: time.Minute}
	if _, err := f.Acquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	r := driver.AcquireRequest{Key: key, Owner: "0123456789abcdef0123456789abcdef", TTL: time.Minute, Waiting: true}
	if err := f.Abandon(ctx, driver.Holding{Key: key, Owner: r.Owner, TTL: r.TTL}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Acquire(ctx, r); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("an attempt after its abandonment: %v, want ErrNotObtained", err)
	}
	if info, err := f.Inspect(ctx, key); err != nil || info.Waiters != 0 {
		t.Fatalf("Inspect after an abandoned attempt: %+v, %v", info, err)
	}
	if err := f.Release(ctx, driver.Holding{Key: key, Owner: holder.Owner}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Acquire(ctx, r); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("an abandoned attempt on a free key: %v, want ErrNotObtained", err)
	}
}

// entry reads owner's queue entry of key: its position and time left.
func entry(t *testing.T, f *FairDriver, key, owner string) (seq int64, left time.Duration) {
	t.Helper()
	var us int64
	err := f.d.db.QueryRowContext(ctxT(t, 5*time.Second), "SELECT seq, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM dlock_locks_fair WHERE lock_key = ? AND owner = ?", key, owner).Scan(&seq, &us)
	if err != nil {
		t.Fatal(err)
	}
	return seq, time.Duration(us) * time.Microsecond
}

// A waiter's later attempts keep its place in the queue and its entry alive;
// an entry that died is replaced by one at the end of the queue.
func TestFairEntryKeepsItsPlace(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	_, f := newFair(t, nil)
	key := dlocktest.Key(t)
	if _, err := f.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r := driver.AcquireRequest{Key: key, Owner: "waiter", TTL: time.Minute, Waiting: true}
	attempt := func() {
		t.Helper()
		_, err := f.Acquire(ctx, r)
		var taken *driver.Taken
		if !errors.As(err, &taken) || !taken.Queued {
			t.Fatalf("an attempt of a waiter: %v", err)
		}
		r.Handle = taken.Handle
	}
	attempt()
	seq, _ := entry(t, f, key, r.Owner)
	// As if the entry were older than fairRefresh: the attempt writes it.
	if _, err := f.d.db.ExecContext(ctx, "UPDATE dlock_locks_fair SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 SECOND WHERE lock_key = ?", key); err != nil {
		t.Fatal(err)
	}
	w := r.Handle.(fairWait)
	w.at = w.at.Add(-fairRefresh)
	r.Handle = w
	attempt()
	again, left := entry(t, f, key, r.Owner)
	if again != seq || left < FairWaiterTTL-time.Second {
		t.Fatalf("a live entry written again: position %d (was %d), %v left", again, seq, left)
	}
	// Another waiter queues behind; then the first one's entry dies.
	other := driver.AcquireRequest{Key: key, Owner: "other", TTL: time.Minute, Waiting: true}
	if _, err := f.Acquire(ctx, other); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	behind, _ := entry(t, f, key, other.Owner)
	if _, err := f.d.db.ExecContext(ctx, "UPDATE dlock_locks_fair SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE lock_key = ? AND owner = ?", key, r.Owner); err != nil {
		t.Fatal(err)
	}
	w = r.Handle.(fairWait)
	w.at = w.at.Add(-fairRefresh)
	r.Handle = w
	attempt()
	if last, left := entry(t, f, key, r.Owner); last <= behind || left < FairWaiterTTL-time.Second {
		t.Fatalf("a dead entry written again: position %d behind %d, %v left", last, behind, left)
	}
}
