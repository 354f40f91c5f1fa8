package natslock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestToldAtOnce: a holder whose key is force-unlocked, deleted or purged by
// another client of the bucket loses its lease as soon as its Driver's watch
// sees the marker, far below its renewal interval.
func TestToldAtOnce(t *testing.T) {
	removals := map[string]func(ctx context.Context, kv jetstream.KeyValue, other *Driver, key string) error{
		"ForceUnlock": func(ctx context.Context, _ jetstream.KeyValue, other *Driver, key string) error {
			_, err := other.ForceUnlock(ctx, key)
			return err
		},
		"Delete": func(ctx context.Context, kv jetstream.KeyValue, _ *Driver, key string) error {
			return kv.Delete(ctx, key)
		},
		"Purge": func(ctx context.Context, kv jetstream.KeyValue, _ *Driver, key string) error {
			return kv.Purge(ctx, key)
		},
		"Put": func(ctx context.Context, kv jetstream.KeyValue, _ *Driver, key string) error {
			_, err := kv.Put(ctx, key, []byte(`{"owner":"somebody else"}`))
			return err
		},
	}
	for name, remove := range removals {
		t.Run(name, func(t *testing.T) {
			c := newClient(t)
			other := newDriver(t)
			kv, err := connect(t, srv.URL).KeyValue(ctxT(t, 10*time.Second), DefaultBucket)
			if err != nil {
				t.Fatal(err)
			}
			took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
				start := time.Now()
				return start, remove(ctx, kv, other, l.Key())
			})
			t.Logf("%s to Done: %v", name, took)
		})
	}
}

// TestWaiterWokenByExpiry: a holder that stops renewing (its process gone)
// leaves the key to the server's expiry, whose marker wakes a waiter at
// once: the waiter does not sleep out its minute between attempts.
func TestWaiterWokenByExpiry(t *testing.T) {
	d := newDriver(t)
	key := dlocktest.Key(t)
	holder, err := NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	l, err := holder.TryLock(ctxT(t, 10*time.Second), key, dlock.WithTTL(time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waiter := newClient(t)
	w, err := waiter.Lock(ctxT(t, 20*time.Second), key, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Unlock(context.Background()) }()
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("the waiter took the key %v after a holding of 1s, want the expiry's marker to wake it", took)
	}
	if w.Token() <= l.Token() {
		t.Errorf("token %d after %d", w.Token(), l.Token())
	}
}

// TestLostConnectionFreesWithinTTL: a holder whose connection is gone
// (renewals fail) holds nothing beyond its TTL: another client takes the key
// within the TTL and the server's second of granularity.
func TestLostConnectionFreesWithinTTL(t *testing.T) {
	js := connect(t, srv.URL)
	d, err := NewDriver(js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	c, _ := NewClient(d)
	key := dlocktest.Key(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	js.Conn().Close()
	other := newClient(t)
	got, err := other.Lock(ctxT(t, 20*time.Second), key, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = got.Unlock(context.Background()) }()
	if took := time.Since(closed); took > 4*time.Second {
		t.Errorf("the key was free %v after the holder's connection closed, TTL 2s", took)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder without a connection still thinks it holds the key")
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("holder: %v", l.Err())
	}
}
