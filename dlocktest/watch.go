package dlocktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// ObserveWatches checks that dlock.WatchLeader on in, a KeyWatcher whose backend
// watches its locks, sees a lock taken and released by another Client (taker)
// as the store reports it: with a polling interval of a minute, each change
// must arrive within within.
func ObserveWatches(t *testing.T, in driver.Inspector, taker dlock.Locker, within time.Duration) {
	t.Helper()
	key := Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*within+10*time.Second)
	defer cancel()
	kw, ok := in.(driver.KeyWatcher)
	if !ok {
		t.Fatalf("%T is not a driver.KeyWatcher", in)
	}
	if _, err := kw.WatchKey(ctx, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("WatchKey of an empty key: %v, want ErrInvalid", err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := dlock.WatchLeader(octx, in, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) dlock.LockInfo {
		t.Helper()
		select {
		case info, ok := <-ch:
			if !ok {
				t.Fatalf("WatchLeader closed before %s", what)
			}
			return info
		case <-time.After(within):
			t.Fatalf("WatchLeader did not report %s within %v (its polling interval is %v)", what, within, time.Minute)
		}
		return dlock.LockInfo{}
	}
	if first := next("the free role"); first.Held {
		t.Fatalf("first report: %+v, want a free role", first)
	}
	l, err := taker.TryLock(ctx, key, dlock.WithMetadata("watched"))
	if err != nil {
		t.Fatal(err)
	}
	if got := next("the new holder"); !got.Held || got.Token != l.Token() || got.Metadata != "watched" {
		t.Errorf("after TryLock: %+v, want held with token %d", got, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := next("the release"); got.Held {
		t.Errorf("after Unlock: %+v, want free", got)
	}
	stop()
	for range ch { // closed once octx ends
	}
}
