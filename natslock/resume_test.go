package natslock

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go/jetstream"
)

// TestResumedLeaseIsToldAtOnce: a holding taken up by another Driver with
// Resume is watched by that Driver as a grant is: a force-unlock reaches the
// resumed lease at once.
func TestResumedLeaseIsToldAtOnce(t *testing.T) {
	for _, k := range []struct {
		name string
		new  func(t *testing.T) (*Client, driver.Inspector)
	}{
		{"mutex", func(t *testing.T) (*Client, driver.Inspector) { d := newDriver(t); return clientOver(t, d, nil), d }},
		{"fair", func(t *testing.T) (*Client, driver.Inspector) { return newFair(t) }},
		{"semaphore", func(t *testing.T) (*Client, driver.Inspector) { return newSemaphore(t, 2) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			from, force := k.new(t)
			to, _ := k.new(t)
			took := dlocktest.PushedLoss(t, dlocktest.Resumed(from, to), dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
				start := time.Now()
				_, err := force.ForceUnlock(ctx, l.Key())
				return start, err
			})
			t.Logf("ForceUnlock to Done: %v", took)
		})
	}
}

// TestResumeOfASemaphorePermit: any of a semaphore's holders is resumed,
// not only the head of its queue; a reference that names a waiter's entry
// (its owner and token, as a forger who read the queue would write it)
// resumes nothing and leaves the entry as it was.
func TestResumeOfASemaphorePermit(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	key := dlocktest.Key(t)
	a, _ := newSemaphore(t, 2)
	first, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	waited := make(chan error, 1)
	w, _ := newSemaphore(t, 2)
	go func() {
		_, err := w.Lock(wctx, key, dlock.WithTTL(30*time.Second))
		waited <- err
	}()
	js := connect(t, srv.URL)
	kv, err := js.KeyValue(ctx, DefaultSemaphoreBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The waiter's entry: the one that is neither holder's.
	watch, err := kv.Watch(ctx, key+".*")
	if err != nil {
		t.Fatal(err)
	}
	var (
		waiter record
		rev    uint64
	)
	for waiter.Owner == "" {
		var e jetstream.KeyValueEntry
		select {
		case e = <-watch.Updates():
		case err := <-waited:
			t.Fatalf("the waiter's Lock returned %v", err)
		case <-ctx.Done():
			t.Fatal("no waiter's entry")
		}
		var rec record
		if e == nil || e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &rec) != nil || rec.Owner == first.Owner() || rec.Owner == second.Owner() {
			continue
		}
		if rec.Token == 0 {
			rec.Token = e.Revision()
		}
		waiter, rev = rec, e.Revision()
	}
	_ = watch.Stop()
	b, _ := newSemaphore(t, 2)
	ref, err := second.Detach()
	if err != nil {
		t.Fatal(err)
	}
	r, err := driver.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	r.Owner, r.Token = waiter.Owner, waiter.Token
	if _, err := b.Resume(ctx, r.String()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Resume of a waiter's entry: %v, want ErrNotHeld", err)
	}
	keys, err := kv.ListKeysFiltered(ctx, key+".*")
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if e, err := kv.Get(ctx, k); err == nil && e.Revision() == rev {
			rev = 0
		}
	}
	if rev != 0 {
		t.Fatalf("the waiter's entry was written by a refused Resume")
	}
	stop()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's Lock: %v, want context.Canceled", err)
	}
	l, err := b.Resume(ctx, ref)
	if err != nil {
		t.Fatalf("Resume of the second permit: %v", err)
	}
	if l.Token() != second.Token() {
		t.Fatalf("resumed token %d, want %d", l.Token(), second.Token())
	}
	for _, l := range []*dlock.Lease{l, first} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResumeWhenTheWatchLags: a Driver whose watch of the queue has not
// delivered the entry yet (a watch lags behind the bucket now and then)
// reads the queue from the bucket, and resumes the holding.
func TestResumeWhenTheWatchLags(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	a, _ := newFair(t)
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := l.Detach()
	if err != nil {
		t.Fatal(err)
	}
	b, f := newFair(t)
	d := f.drv()
	kw, w, leave := d.awaitQueue(key)
	defer leave()
	if err := d.queueReady(ctx, kw, w); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	clear(kw.queue) // as if the entry's message had not come yet
	d.mu.Unlock()
	r, err := b.Resume(ctx, ref)
	if err != nil {
		t.Fatalf("Resume with a watch that has not seen the entry: %v", err)
	}
	if r.Token() != l.Token() {
		t.Fatalf("resumed token %d, want %d", r.Token(), l.Token())
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
