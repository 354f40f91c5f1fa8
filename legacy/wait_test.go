package legacy_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// phpTakeover leaves key as seed 001's script does when it takes a run-out
// stamp over: a seconds stamp LOCK_EXPIRE+1 beyond the one it read, that is
// about 2×LOCK_EXPIRE+2 seconds ahead, and an EXPIRE of only LOCK_EXPIRE+1.
func phpTakeover(ctx context.Context, rdb *redis.Client, key string, expire int64) error {
	// A stamp that has run out on a key that has not expired yet.
	if err := rdb.Set(ctx, key, strconv.FormatInt(time.Now().Unix()-1, 10), 0).Err(); err != nil {
		return err
	}
	p := &phpLock{rdb: rdb, key: key, expire: expire, now: time.Now}
	if ok, err := p.tryLock(ctx); !ok || err != nil {
		return fmt.Errorf("php takeover: %v %w", ok, err)
	}
	return nil
}

// TestBusyRemainingWithinKeyExpiry: on a key written by seed 001's script,
// whose stamp and EXPIRE disagree, the time left that a busy attempt reports
// never goes beyond the key's real expiry. A waiter sleeps that long, and an
// old client polling the key takes it as soon as it has expired.
func TestBusyRemainingWithinKeyExpiry(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	rdb := newRDB(t)
	c := newLegacy(t, legacy.Format{Unit: time.Second, Expire: true})
	for _, takeover := range []bool{false, true} {
		key := dlocktest.Key(t)
		if takeover {
			if err := phpTakeover(ctx, rdb, key, 3); err != nil {
				t.Fatal(err)
			}
		} else if ok, err := (&phpLock{rdb: rdb, key: key, expire: 3, now: time.Now}).tryLock(ctx); !ok || err != nil {
			t.Fatalf("php lock: %v %v", ok, err)
		}
		start := time.Now()
		_, err := c.TryLock(ctx, key)
		var busy *dlock.BusyError
		if !errors.As(err, &busy) {
			t.Fatalf("TryLock on the PHP lock: %v, want a BusyError", err)
		}
		pttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The PTTL read after the attempt is below the one the attempt saw by
		// less than the time since it started (and PTTL counts whole ms).
		slack := time.Since(start) + time.Millisecond
		stamp, err := rdb.Get(ctx, key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SUMMARY seed 001 key (takeover %v): busy Remaining %v, key PTTL %v, stamp runs out in %v",
			takeover, busy.Remaining, pttl, time.Until(time.Unix(stamp+1, 0)).Round(time.Millisecond))
		if busy.Remaining <= 0 || busy.Remaining > pttl+slack {
			t.Errorf("takeover %v: Remaining %v, want in (0, PTTL %v + %v]", takeover, busy.Remaining, pttl, slack)
		}
	}
}

// TestWaiterGetsShareAgainstPoller: when a lock that seed 001's script took over
// expires, a dlock waiter (default retry) races an old client polling every
// 50 ms. The waiter wakes just after the key's expiry, so it wins every round
// in which the old client's next poll is not within a few milliseconds of it.
// The old client's phase is spread evenly over the poll interval, one round
// each, with the rounds on their own keys, staggered.
func TestWaiterGetsShareAgainstPoller(t *testing.T) {
	const (
		rounds  = 10
		poll    = 50 * time.Millisecond
		stagger = 60 * time.Millisecond
	)
	ctx := ctxT(t, 20*time.Second)
	c := newLegacy(t, legacy.Format{Unit: time.Second, Expire: true}, dlock.WithTTL(time.Second))
	var dlockWon, phpWon atomic.Int32
	g, gctx := errgroup.WithContext(ctx)
	for r := range rounds {
		rdb, prdb := newRDB(t), newRDB(t)
		phase := poll * time.Duration(2*r+1) / (2 * rounds)
		g.Go(func() error {
			select {
			case <-gctx.Done():
				return gctx.Err()
			case <-time.After(time.Duration(r) * stagger):
			}
			key := dlocktest.Key(t)
			if err := phpTakeover(gctx, rdb, key, 1); err != nil {
				return err
			}
			pttl, err := rdb.PTTL(gctx, key).Result()
			if err != nil {
				return err
			}
			expiry := time.Now().Add(pttl)
			rctx, cancel := context.WithTimeout(gctx, pttl+5*time.Second)
			defer cancel()
			poller := &phpLock{rdb: prdb, key: key, expire: 1, now: time.Now}
			polled := make(chan error, 1)
			go func() {
				// The old client polls on a 50 ms grid that lies phase after
				// the expiry; its first poll is the first grid time from now.
				next := expiry.Add(phase)
				for next.After(time.Now()) {
					next = next.Add(-poll)
				}
				next = next.Add(poll)
				timer := time.NewTimer(time.Until(next))
				defer timer.Stop()
				for {
					select {
					case <-rctx.Done():
						polled <- nil
						return
					case <-timer.C:
					}
					ok, err := poller.tryLock(rctx)
					if err != nil || ok {
						if ok {
							phpWon.Add(1)
							cancel()
						}
						polled <- err
						return
					}
					next = next.Add(poll)
					timer.Reset(time.Until(next))
				}
			}()
			l, err := c.Lock(rctx, key)
			if err == nil {
				dlockWon.Add(1)
				cancel()
			} else if errors.Is(err, dlock.ErrNotObtained) && rctx.Err() != nil && gctx.Err() == nil {
				err = nil // the old client got it first
			}
			// Unlock only once the old client has stopped polling, so that a
			// win of both in one round means that both held the lock at once.
			if perr := <-polled; perr != nil && rctx.Err() == nil {
				return perr
			}
			if l != nil {
				err = l.Unlock(ctx)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	d, p := dlockWon.Load(), phpWon.Load()
	t.Logf("SUMMARY seed 001 takeover expiring: a dlock waiter won %d of %d rounds, an old client polling every %v %d", d, rounds, poll, p)
	if d+p != rounds {
		t.Fatalf("%d rounds won by dlock and %d by the old client, want %d in all", d, p, rounds)
	}
	if d < rounds/2 {
		t.Fatalf("the dlock waiter won %d of %d rounds, want at least half", d, rounds)
	}
}
