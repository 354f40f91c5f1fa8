package legacy_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

type contender struct {
	name   string
	c      oldClient
	rounds int // critical sections to run
	// until, when set, keeps the contender going after its rounds until closed.
	until <-chan struct{}
}

func (c contender) more(done int) bool {
	if done < c.rounds {
		return true
	}
	if c.until == nil {
		return false
	}
	select {
	case <-c.until:
		return false
	default:
		return true
	}
}

// run takes the lock c.rounds times, polling every millisecond as the recipes
// do (bounded by ctx), and holds it for hold each time, reporting to o.
func (c contender) run(ctx context.Context, o *overlap, hold time.Duration) error {
	for done := 0; c.more(done); {
		ok, err := c.c.tryLock(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if !ok {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %d of %d rounds: %w", c.name, done, c.rounds, ctx.Err())
			case <-time.After(time.Millisecond):
			}
			continue
		}
		o.enter(c.name)
		time.Sleep(hold) // the protected work
		o.leave()
		done++
		if err := c.c.unlock(ctx); err != nil {
			return fmt.Errorf("%s unlock: %w", c.name, err)
		}
	}
	return nil
}

// contend runs every contender in its own goroutine until each has run its
// rounds, and returns the checker.
func contend(ctx context.Context, t *testing.T, cs []contender, hold time.Duration) *overlap {
	t.Helper()
	o := &overlap{}
	if err := runContenders(ctx, o, cs, hold); err != nil {
		t.Fatal(err)
	}
	return o
}

func lostStamps(cs []contender) int {
	n := 0
	for _, c := range cs {
		if d, ok := c.c.(*dlockClient); ok {
			n += int(d.lost.Load())
		}
	}
	return n
}

func (o *overlap) summary() string {
	names := make([]string, 0, len(o.by))
	for n := range o.by {
		names = append(names, n)
	}
	sort.Strings(names)
	s := ""
	for _, n := range names {
		s += fmt.Sprintf(" %s=%d", n, o.by[n])
	}
	return s
}

// TestInteropMillis: the Java recipes (seeds 000 and 002) and dlock's legacy
// locker share one millisecond key; with agreeing clocks nobody overlaps.
func TestInteropMillis(t *testing.T) {
	key := dlocktest.Key(t)
	lk := "lock." + key
	const expire = 10 * time.Second // no stamp runs out during the test
	var cs []contender
	for i := 0; i < 2; i++ {
		cs = append(cs,
			contender{name: "jedis", c: &jedisLock{rdb: newRDB(t), key: lk, expired: expire, now: time.Now}, rounds: 10},
			contender{name: "spring", c: &springLock{rdb: newRDB(t), key: lk, expire: expire, now: time.Now}, rounds: 10},
			contender{name: "dlock", c: &dlockClient{l: newLegacy(t, legacy.Format{Key: legacy.Prefix("lock.")}), key: key, opts: []dlock.Option{dlock.WithTTL(expire)}}, rounds: 10},
		)
	}
	o := contend(ctxT(t, 40*time.Second), t, cs, 200*time.Microsecond)
	t.Logf("SUMMARY interop millis: %d critical sections (%s), %d overlaps", o.entries.Load(), o.summary(), o.overlaps.Load())
	if o.overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", o.overlaps.Load())
	}
	if n := lostStamps(cs); n != 0 {
		t.Fatalf("%d dlock stamps replaced although no stamp ran out", n)
	}
}

// TestInteropSeconds: the PHP script (seed 001), the C++ recipe (seed 003) and
// dlock's legacy locker in seconds share one key. Seed 001's unlock never frees a
// live lock (see TestFaultPHPUnlockKeepsLock), so each of its holdings blocks the
// key until its stamp runs out: it runs once.
func TestInteropSeconds(t *testing.T) {
	key := dlocktest.Key(t)
	lk := "lock." + key
	var cs []contender
	for i := 0; i < 2; i++ {
		cs = append(cs,
			contender{name: "cpp", c: &cppLock{rdb: newRDB(t), key: lk, timeout: 5, now: time.Now}, rounds: 8},
			contender{name: "dlock", c: &dlockClient{l: newLegacy(t, legacy.Format{Key: legacy.Prefix("lock."), Unit: time.Second}), key: key, opts: []dlock.Option{dlock.WithTTL(5 * time.Second)}}, rounds: 8},
		)
	}
	cs = append(cs, contender{name: "php", c: &phpLock{rdb: newRDB(t), key: lk, expire: 1, now: time.Now}, rounds: 1})
	o := contend(ctxT(t, 40*time.Second), t, cs, 200*time.Microsecond)
	// When the PHP stamp runs out, a C++ client may read it, dlock take the lock
	// over, and the C++ client's GETSET then replace dlock's stamp (it loses,
	// but wrote): the dlock Unlock reports ErrNotHeld and leaves the key.
	t.Logf("SUMMARY interop seconds: %d critical sections (%s), %d overlaps, %d dlock stamps replaced by a losing GETSET",
		o.entries.Load(), o.summary(), o.overlaps.Load(), lostStamps(cs))
	if o.overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", o.overlaps.Load())
	}
}

// TestFaultSkewedClockTakesLiveLock: a client whose clock runs ahead of the
// holder's by more than the time left sees the stamp as run out and takes the
// lock over while it is held. dlock's locker with a skewed Clock does the same
// (the stamp format has nothing else to go on); with ServerClock, dlock lockers
// agree whatever their hosts' clocks say.
func TestFaultSkewedClockTakesLiveLock(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	rdb := newRDB(t)
	const rounds, skew = 10, 30 * time.Second
	f := legacy.Format{Key: legacy.Prefix("lock.")}
	holder := newLegacy(t, f, dlock.WithTTL(10*time.Second))
	fast := newLegacy(t, legacy.Format{Key: legacy.Prefix("lock."), Clock: skewed(skew)})
	var javaTook, dlockTook, detected int
	for i := 0; i < rounds; i++ {
		key := dlocktest.Key(t)
		l, err := holder.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		j := &springLock{rdb: rdb, key: "lock." + key, expire: 10 * time.Second, now: skewed(skew)}
		if ok, err := j.tryLock(ctx); err != nil {
			t.Fatal(err)
		} else if ok {
			javaTook++
		}
		// The dlock holder finds out at its next renewal, and its Unlock leaves
		// the usurper's key alone.
		if err := l.Extend(ctx, 10*time.Second); errors.Is(err, dlock.ErrNotHeld) {
			detected++
		}
		_ = l.Unlock(ctx)
		if rdb.Exists(ctx, "lock."+key).Val() != 1 {
			t.Fatal("the dlock holder's Unlock deleted the usurper's key")
		}
		rdb.Del(ctx, "lock."+key)

		key = dlocktest.Key(t)
		l, err = holder.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l2, err := fast.TryLock(ctx, key); err == nil {
			dlockTook++
			_ = l2.Unlock(ctx)
		}
		_ = l.Unlock(ctx)
	}
	t.Logf("SUMMARY skew +%v: a Java client (seed 002) took %d of %d live dlock locks; the dlock holder saw ErrNotHeld at its next Extend %d times", skew, javaTook, rounds, detected)
	t.Logf("SUMMARY skew +%v: a dlock locker on the local clock took %d of %d live locks", skew, dlockTook, rounds)
	if javaTook != rounds || detected != rounds || dlockTook != rounds {
		t.Fatalf("skewed takeovers: java %d, detected %d, dlock %d; want %d each", javaTook, detected, dlockTook, rounds)
	}
	// With ServerClock, the skewed host's clock does not count.
	sf := legacy.Format{Key: legacy.Prefix("lock."), ServerClock: true}
	a := newLegacy(t, sf, dlock.WithTTL(10*time.Second))
	b := newLegacy(t, sf)
	key := dlocktest.Key(t)
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("ServerClock: second TryLock %v, want ErrNotObtained", err)
	}
	_ = l.Unlock(ctx)
}

// TestFaultGetSetRace: takeovers of a run-out lock that read the same stamp and
// then GETSET one after the other. One wins (GETSET returned the stamp it read);
// every loser has still overwritten the winner's stamp with its own. Seed 002
// calls the difference negligible: it is the spread of the clients' clocks and
// timeouts, and it moves the winner's expiry back as often as forward. With
// mixed timeouts (services configured differently) it moves it back by the
// difference. dlock's takeover is one script: a losing attempt writes nothing.
func TestFaultGetSetRace(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	const racers, rounds = 4, 40
	setup := newRDB(t)
	conns := make([]*redis.Client, racers)
	lockers := make([]*legacy.Client, racers)
	for i := range conns {
		conns[i] = newRDB(t)
		lockers[i] = newLegacy(t, legacy.Format{}, dlock.WithTTL(10*time.Second))
	}
	for _, mix := range []struct {
		name     string
		timeouts []time.Duration
	}{
		{"same timeout 10s", []time.Duration{10 * time.Second}},
		{"timeouts 60s and 10s", []time.Duration{60 * time.Second, 10 * time.Second}},
	} {
		var overwritten, movedBack int
		var maxBack, maxFwd int64
		for r := 0; r < rounds; r++ {
			key := dlocktest.Key(t)
			if err := setup.Set(ctx, key, strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10), 0).Err(); err != nil {
				t.Fatal(err)
			}
			var read sync.WaitGroup
			read.Add(racers)
			go_ := make(chan struct{})
			cs := make([]*springLock, racers)
			won := make([]bool, racers)
			g, gctx := errgroup.WithContext(ctx)
			for i := range cs {
				cs[i] = &springLock{rdb: conns[i], key: key, expire: mix.timeouts[i%len(mix.timeouts)], now: time.Now,
					beforeGetSet: func() { read.Done(); <-go_ }}
				g.Go(func() error {
					ok, err := cs[i].tryLock(gctx)
					won[i] = ok
					return err
				})
			}
			read.Wait() // every racer has read the run-out stamp
			close(go_)
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			winner := -1
			for i, w := range won {
				if w {
					if winner >= 0 {
						t.Fatalf("two GETSET winners")
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatal("no GETSET winner")
			}
			final, err := setup.Get(ctx, key).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if d := final - cs[winner].wrote; d != 0 {
				overwritten++
				if d < 0 {
					movedBack++
					maxBack = max(maxBack, -d)
				} else {
					maxFwd = max(maxFwd, d)
				}
			}
		}
		t.Logf("SUMMARY GETSET race (%s, %d racers, %d rounds): the winner's stamp was overwritten in %d rounds, moved back in %d (at most %dms), forward at most %dms",
			mix.name, racers, rounds, overwritten, movedBack, maxBack, maxFwd)
	}

	// The same race in a fixed order: a 60s client and a 10s client read the
	// run-out stamp; the 60s client's GETSET comes first and wins, the 10s
	// client's GETSET second: the winner's lock now runs out 50s early.
	key := dlocktest.Key(t)
	if err := setup.Set(ctx, key, strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	var read sync.WaitGroup
	read.Add(2)
	turn := []chan struct{}{make(chan struct{}), make(chan struct{})}
	res := make([]chan bool, 2)
	cs := make([]*springLock, 2)
	for i, e := range []time.Duration{60 * time.Second, 10 * time.Second} {
		res[i] = make(chan bool, 1)
		cs[i] = &springLock{rdb: conns[i], key: key, expire: e, now: time.Now, beforeGetSet: func() { read.Done(); <-turn[i] }}
		go func() {
			ok, err := cs[i].tryLock(ctx)
			res[i] <- ok && err == nil
		}()
	}
	read.Wait()
	close(turn[0])
	won60 := <-res[0]
	close(turn[1])
	won10 := <-res[1]
	final, err := setup.Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	back := time.Duration(cs[0].wrote-final) * time.Millisecond
	t.Logf("SUMMARY GETSET race in order (60s client wins, 10s client loses): the winner's lock runs out %v early", back)
	if !won60 || won10 || back < 49*time.Second || back > 51*time.Second {
		t.Fatalf("ordered race: 60s won %v, 10s won %v, moved back %v; want true, false, 50s", won60, won10, back)
	}

	// An old client that read the run-out stamp just before a dlock locker took
	// the lock over loses its GETSET but writes its own stamp. With the lease's
	// timeout, that stamp is at most the lease's (it was computed first), and
	// equal to it when both were computed in the same millisecond: the key then
	// holds exactly the stamp the lease wrote, and the lease keeps the lock.
	// Otherwise the loser's stamp replaces the lease's: the dlock holder finds
	// out at its next Extend, and its Unlock leaves the key alone (nobody holds
	// it until the loser's stamp has passed). A shorter timeout (the first
	// round) always writes a stamp below the lease's.
	var sameStamp, replaced int
	for r := 0; r < 10; r++ {
		expire := 10 * time.Second
		if r == 0 {
			expire = 5 * time.Second
		}
		key := dlocktest.Key(t)
		if err := setup.Set(ctx, key, strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10), 0).Err(); err != nil {
			t.Fatal(err)
		}
		var lease *dlock.Lease
		var leaseStamp int64
		j := &springLock{rdb: conns[0], key: key, expire: expire, now: time.Now, beforeGetSet: func() {
			var err error
			if lease, err = lockers[0].TryLock(ctx, key); err != nil {
				t.Error(err)
				return
			}
			leaseStamp, err = setup.Get(ctx, key).Int64()
			if err != nil {
				t.Error(err)
			}
		}}
		if ok, err := j.tryLock(ctx); ok || err != nil || lease == nil {
			t.Fatalf("old client after dlock's takeover: %v %v", ok, err)
		}
		errExtend := lease.Extend(ctx, 10*time.Second)
		errUnlock := lease.Unlock(ctx)
		left, err := setup.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		switch {
		case j.wrote > leaseStamp:
			t.Fatalf("timeout %v: the loser wrote %d, above the lease's stamp %d", expire, j.wrote, leaseStamp)
		case j.wrote == leaseStamp:
			sameStamp++
			if expire != 10*time.Second || errExtend != nil || errUnlock != nil || left != "" {
				t.Fatalf("loser wrote the lease's own stamp %d (timeout %v): Extend %v, Unlock %v, key %q; want the lease kept, then the key deleted",
					leaseStamp, expire, errExtend, errUnlock, left)
			}
		default:
			replaced++
			if !errors.Is(errExtend, dlock.ErrNotHeld) || !errors.Is(errUnlock, dlock.ErrNotHeld) || left != strconv.FormatInt(j.wrote, 10) {
				t.Fatalf("losing GETSET (timeout %v): Extend %v, Unlock %v, key %q (loser wrote %d over %d)", expire, errExtend, errUnlock, left, j.wrote, leaseStamp)
			}
		}
	}
	t.Logf("SUMMARY losing GETSET after a dlock takeover: the loser's stamp replaced the lease's in %d of 10 rounds (Extend and Unlock ErrNotHeld, key left with the loser's stamp); in %d it was the lease's own stamp (same millisecond) and the lease kept the lock",
		replaced, sameStamp)
	if replaced == 0 {
		t.Fatal("no round in which the loser's stamp replaced the lease's")
	}

	// dlock's legacy lockers race the same way: one wins, the key holds exactly
	// its stamp.
	var losersWrote int
	for r := 0; r < rounds; r++ {
		key := dlocktest.Key(t)
		if err := setup.Set(ctx, key, strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10), 0).Err(); err != nil {
			t.Fatal(err)
		}
		leases := make([]*dlock.Lease, racers)
		g, gctx := errgroup.WithContext(ctx)
		for i := range leases {
			l := lockers[i]
			g.Go(func() error {
				lease, err := l.TryLock(gctx, key)
				if errors.Is(err, dlock.ErrNotObtained) {
					return nil
				}
				leases[i] = lease
				return err
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		var winner *dlock.Lease
		for _, l := range leases {
			if l != nil {
				if winner != nil {
					t.Fatal("two dlock winners")
				}
				winner = l
			}
		}
		if winner == nil {
			t.Fatal("no dlock winner")
		}
		comp, _ := legacy.CompanionKey(key)
		if setup.Get(ctx, key).Val() != setup.HGet(ctx, comp, "v").Val() || setup.HGet(ctx, comp, "o").Val() != winner.Owner() {
			losersWrote++
		}
		if err := winner.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("SUMMARY dlock takeover race (%d racers, %d rounds): a loser changed the winner's stamp in %d rounds", racers, rounds, losersWrote)
	if losersWrote != 0 {
		t.Fatalf("dlock losers overwrote the winner's stamp in %d rounds", losersWrote)
	}
}

// waitStampPast waits until the stamp in key (milliseconds) is in the past.
func waitStampPast(ctx context.Context, t *testing.T, get func() (int64, error)) {
	t.Helper()
	for {
		s, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if s < time.Now().UnixMilli() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("stamp never ran out")
		case <-time.After(time.Millisecond):
		}
	}
}

// TestFaultOverrunUnlockDeletesSuccessor: a holder that runs past its stamp has
// lost the lock to a successor, and the recipes' unlock (DEL) then deletes the
// successor's lock, so a third client gets in beside it. dlock's locker in the
// same place gets ErrNotHeld (ErrLockLost) from Unlock and leaves the key alone.
func TestFaultOverrunUnlockDeletesSuccessor(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	const rounds, short = 5, 30 * time.Millisecond
	rdb := newRDB(t)
	var doubled int
	for r := 0; r < rounds; r++ {
		key := dlocktest.Key(t)
		a := &springLock{rdb: newRDB(t), key: key, expire: short, now: time.Now}
		b := &springLock{rdb: newRDB(t), key: key, expire: 10 * time.Second, now: time.Now}
		c := &jedisLock{rdb: newRDB(t), key: key, expired: 10 * time.Second, now: time.Now}
		if ok, err := a.tryLock(ctx); !ok || err != nil {
			t.Fatalf("a: %v %v", ok, err)
		}
		waitStampPast(ctx, t, func() (int64, error) { return rdb.Get(ctx, key).Int64() }) // a overruns
		if ok, err := b.tryLock(ctx); !ok || err != nil {
			t.Fatalf("b takeover: %v %v", ok, err)
		}
		if err := a.unlock(ctx); err != nil { // deletes b's lock
			t.Fatal(err)
		}
		if ok, err := c.tryLock(ctx); err != nil {
			t.Fatal(err)
		} else if ok {
			doubled++ // b and c both hold
		}
	}
	t.Logf("SUMMARY overrun: the recipes' unlock deleted the successor's lock and a third client got in beside it in %d of %d rounds", doubled, rounds)
	if doubled != rounds {
		t.Fatalf("double holders in %d of %d rounds", doubled, rounds)
	}

	f := legacy.Format{}
	var kept int
	for r := 0; r < rounds; r++ {
		key := dlocktest.Key(t)
		// Half a second: room for the grant's round trip on a loaded machine.
		l, err := newLegacy(t, f).TryLock(ctx, key, dlock.WithTTL(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done() // runs past its lease
		b := &springLock{rdb: newRDB(t), key: key, expire: 10 * time.Second, now: time.Now}
		waitStampPast(ctx, t, func() (int64, error) {
			// The lease releases the key after its loss, or its stamp runs out.
			v, err := rdb.Get(ctx, key).Int64()
			if errors.Is(err, redis.Nil) {
				return 0, nil
			}
			return v, err
		})
		if ok, err := b.tryLock(ctx); !ok || err != nil {
			t.Fatalf("b takeover: %v %v", ok, err)
		}
		before := rdb.Get(ctx, key).Val()
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Unlock after overrun: %v, want ErrLockLost", err)
		}
		if rdb.Get(ctx, key).Val() == before {
			kept++
		}
		c := &jedisLock{rdb: newRDB(t), key: key, expired: 10 * time.Second, now: time.Now}
		if ok, _ := c.tryLock(ctx); ok {
			t.Fatal("a third client got in beside the successor")
		}
	}
	t.Logf("SUMMARY overrun: dlock's Unlock returned ErrLockLost and left the successor's lock in %d of %d rounds", kept, rounds)
	if kept != rounds {
		t.Fatalf("successor's lock kept in %d of %d rounds", kept, rounds)
	}
}

// TestFaultPHPUnlockKeepsLock: seed 001's unlock deletes the key only when its
// stamp has run out, the wrong way round, so a lock it releases stays held
// until its stamp (or the EXPIRE it set) runs out.
func TestFaultPHPUnlockKeepsLock(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	p := &phpLock{rdb: newRDB(t), key: key, expire: 3, now: time.Now}
	if ok, err := p.tryLock(ctx); !ok || err != nil {
		t.Fatalf("php lock: %v %v", ok, err)
	}
	if err := p.unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newLegacy(t, legacy.Format{Unit: time.Second}).TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock after the PHP unlock: %v, want ErrNotObtained", err)
	}
	stamp, err := p.rdb.Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SUMMARY seed 001 unlock: the released key stays held by its stamp for %v (its EXPIRE: %v)",
		time.Until(time.Unix(stamp, 0)).Round(time.Millisecond), p.rdb.PTTL(ctx, key).Val())
}
