package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

func newRWMutex(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *redislock.RWMutex {
	t.Helper()
	m, err := redislock.NewRWMutex(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRWMutexWriteConformance: the write side is a mutex.
func TestRWMutexWriteConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindWrite},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			return newRWMutex(t, newRDB(t, srv.Addr), opts...)
		},
		Occupy: func(t testing.TB, key string) func() bool { return occupyHash(t, newRDB(t, srv.Addr), key) },
	})
}

// readersAndWriters runs readers and writers from several RWMutexes on one key,
// checking with shared counters that a writer is never inside with anybody, that
// readers do share the lock, and that every writer gets its turn.
func readersAndWriters(t *testing.T, mk func() *redislock.RWMutex) {
	const clients, readers, writers, rounds = 3, 3, 1, 6
	key := dlocktest.Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var r, w, mostReaders, writes atomic.Int32
	var mu sync.Mutex
	var lastWriteToken uint64
	g, gctx := errgroup.WithContext(ctx)
	for c := 0; c < clients; c++ {
		m := mk()
		for i := 0; i < readers+writers; i++ {
			write := i < writers
			g.Go(func() error {
				for n := 0; n < rounds; n++ {
					var l *dlock.Lease
					var err error
					if write {
						l, err = m.Lock(gctx, key)
					} else {
						l, err = m.RLocker().Lock(gctx, key)
					}
					if err != nil {
						return err
					}
					if write {
						if w.Add(1) != 1 || r.Load() != 0 {
							return errors.New("a writer inside with another holder")
						}
						mu.Lock()
						if l.Token() <= lastWriteToken {
							mu.Unlock()
							return fmt.Errorf("write token %d not above %d", l.Token(), lastWriteToken)
						}
						lastWriteToken = l.Token()
						mu.Unlock()
						writes.Add(1)
						time.Sleep(time.Millisecond)
						w.Add(-1)
					} else {
						v := r.Add(1)
						if w.Load() != 0 {
							return errors.New("a reader inside with a writer")
						}
						for m := mostReaders.Load(); v > m && !mostReaders.CompareAndSwap(m, v); m = mostReaders.Load() {
						}
						time.Sleep(2 * time.Millisecond)
						r.Add(-1)
					}
					if err := l.Unlock(gctx); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if writes.Load() != clients*writers*rounds {
		t.Errorf("%d writes, want %d", writes.Load(), clients*writers*rounds)
	}
	if mostReaders.Load() < 2 {
		t.Errorf("readers never shared the lock (at most %d at once)", mostReaders.Load())
	}
	t.Logf("most readers at once: %d", mostReaders.Load())
}

func TestRWMutexReadersAndWriters(t *testing.T) {
	readersAndWriters(t, func() *redislock.RWMutex { return newRWMutex(t, newRDB(t, srv.Addr)) })
}

// TestRWMutexWriterNotStarvedByReaders: a writer waiting for a stream of
// overlapping readers gets the lock once the readers that came before it leave.
func TestRWMutexWriterNotStarvedByReaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	m := newRWMutex(t, newRDB(t, srv.Addr))
	readers := newRWMutex(t, newRDB(t, srv.Addr)).RLocker()
	// A stream of readers, staggered so that one is always inside: each holds
	// for 32ms and comes back at once, 8ms after the one before it.
	stop := make(chan struct{})
	var g errgroup.Group
	for i := 0; i < 4; i++ {
		g.Go(func() error {
			time.Sleep(time.Duration(i) * 8 * time.Millisecond)
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				l, err := readers.Lock(ctx, key, dlock.WithTTL(5*time.Second))
				if err != nil {
					return err
				}
				time.Sleep(32 * time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					return err
				}
			}
		})
	}
	eventually(t, "readers inside", func() bool {
		info, err := m.Inspect(ctx, key)
		return err == nil && info.Holders >= 3
	})
	start := time.Now()
	w, err := m.Lock(ctx, key, dlock.WithWait(3*time.Second))
	close(stop)
	if err != nil {
		t.Fatalf("writer starved by readers: %v", err)
	}
	t.Logf("writer got in %v after it came, through a stream of readers", time.Since(start))
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestRWMutexCrashedReaderFreesShare: a reader that never unlocks holds its share
// until its TTL only; a writer waits for it and no longer.
func TestRWMutexCrashedReaderFreesShare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	const ttl = 600 * time.Millisecond
	crashed := newRWMutex(t, newRDB(t, srv.Addr)).RLocker()
	r, err := crashed.TryLock(ctx, key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m := newRWMutex(t, newRDB(t, srv.Addr))
	w, err := m.Lock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < ttl/2 || el > ttl+time.Second {
		t.Errorf("writer got in %v after a %v reader came", el, ttl)
	}
	if w.Token() <= r.Token() {
		t.Errorf("writer token %d not above reader's %d", w.Token(), r.Token())
	}
	<-r.Done()
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRWMutexDeadWriterMarkIsBounded: a writer that died while waiting bars new
// readers for WriterWaitMark at most, and one that gives up lifts its mark.
func TestRWMutexDeadWriterMarkIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	rdb := newRDB(t, srv.Addr)
	m := newRWMutex(t, rdb)
	r, err := m.RLocker().TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx)
	// A writer gives up: its mark goes with it.
	if _, err := m.Lock(ctx, key, dlock.WithWait(100*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("writer: %v", err)
	}
	r2, err := m.RLocker().TryLock(ctx, key)
	if err != nil {
		t.Fatalf("reader after the waiting writer gave up: %v", err)
	}
	_ = r2.Unlock(ctx)
	// A writer that died while waiting: its queue entry, as a failed attempt
	// leaves it.
	mark := time.Now().Add(300 * time.Millisecond).UnixMilli()
	if err := rdb.RPush(ctx, redislock.QueueKey(key), "dead").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, redislock.QueueDeadlineKey(key), redis.Z{Score: float64(mark), Member: "dead"}).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = m.RLocker().TryLock(ctx, key)
	var busy *dlock.BusyError
	if !errors.As(err, &busy) || busy.Remaining > 300*time.Millisecond {
		t.Fatalf("reader while a writer waits: %v", err)
	}
	start := time.Now()
	r3, err := m.RLocker().Lock(ctx, key, dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("reader after a dead writer's mark: %v", err)
	}
	t.Logf("reader in %v after the dead writer's mark", time.Since(start))
	_ = r3.Unlock(ctx)
}

// TestRWMutexWriterReleaseWakesAllReaders: readers in several Clients waiting for
// a writer all get in on its release, without polling and at once.
func TestRWMutexWriterReleaseWakesAllReaders(t *testing.T) {
	const clients, perClient = 3, 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	w, err := newRWMutex(t, newRDB(t, srv.Addr)).TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	probe := newRDB(t, srv.Addr)
	var cnts tally
	in := make(chan *dlock.Lease, clients*perClient)
	var g errgroup.Group
	for i := 0; i < clients; i++ {
		rl := newRWMutex(t, cnts.rdb(t)).RLocker()
		openLossWatch(t, ctx, rl, fmt.Sprint(key, "-warm-", i)) // its first check is not the wake-up's
		for j := 0; j < perClient; j++ {
			g.Go(func() error {
				l, err := rl.Lock(ctx, key)
				if err == nil {
					in <- l
				}
				return err
			})
		}
	}
	total := cnts.total
	ch := redislock.WakeChannel(key)
	eventually(t, "readers subscribed", func() bool { return probe.PubSubNumSub(ctx, ch).Val()[ch] == clients })
	lossWatchers(t, ctx, probe, clients+1)
	quiet(t, total)
	before := total()
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	close(in)
	var ls []*dlock.Lease
	for l := range in {
		ls = append(ls, l)
	}
	if spent := total() - before; spent != clients*perClient {
		t.Errorf("%d commands for %d readers woken at once, want one each", spent, clients*perClient)
	}
	for _, l := range ls {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRWMutexUpgradeAndDowngrade: an upgrade is refused and leaves the read lock
// held; a downgrade turns the writer into a reader at once, with a fresh token,
// and lets waiting readers in while writers stay out.
func TestRWMutexUpgradeAndDowngrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	m := newRWMutex(t, newRDB(t, srv.Addr))
	r, err := m.RLocker().TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := m.Upgrade(ctx, r); !errors.Is(err, redislock.ErrUpgrade) || !errors.Is(err, dlock.ErrInvalid) || l != nil {
		t.Fatalf("Upgrade: %v, %v", l, err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatalf("read lock after a refused upgrade: %v", err)
	}
	w, err := m.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	other := newRWMutex(t, newRDB(t, srv.Addr))
	waiting := make(chan error, 1)
	go func() {
		l, err := other.RLocker().Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		waiting <- err
	}()
	eventually(t, "reader waiting", func() bool {
		return newRDB(t, srv.Addr).ZCard(ctx, redislock.ReadersKey(key)).Val() == 1
	})
	d, err := m.Downgrade(ctx, w, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	if d.Token() <= w.Token() {
		t.Errorf("downgraded token %d not above the writer's %d", d.Token(), w.Token())
	}
	if !errors.Is(w.Err(), dlock.ErrReleased) && !errors.Is(w.Err(), dlock.ErrNotHeld) {
		t.Errorf("write lease after Downgrade: %v", w.Err())
	}
	if err := <-waiting; err != nil {
		t.Fatalf("waiting reader after the downgrade: %v", err)
	}
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("writer while the downgraded reader holds: %v", err)
	}
	if _, err := m.Downgrade(ctx, w); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Downgrade: %v", err)
	}
	if err := d.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Downgrade(ctx, nil); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Downgrade(nil): %v", err)
	}
	var nilRW *redislock.RWMutex
	if _, err := nilRW.Upgrade(ctx, r); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil RWMutex Upgrade: %v", err)
	}
}

// TestRWMutexCancelledWaitersLeaveNothing: readers and writers that give up leave
// no mark and no flag that bars anybody.
func TestRWMutexCancelledWaitersLeaveNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	probe := newRDB(t, srv.Addr)
	m := newRWMutex(t, newRDB(t, srv.Addr))
	w, err := m.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		wctx, wcancel := context.WithTimeout(ctx, time.Duration(i%10)*time.Millisecond)
		var l dlock.Locker = m.Client
		if i%2 == 1 {
			l = m.RLocker()
		}
		if _, err := l.Lock(wctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("waiter on a held write lock: %v", err)
		}
		wcancel()
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := probe.Exists(ctx, redislock.LockKey(key), redislock.HoldersKey(key)).Val(); n != 0 {
		t.Errorf("%d keys left after cancelled waiters: %v", n, probe.HGetAll(ctx, redislock.LockKey(key)).Val())
	}
	// Both sides are free at once.
	r, err := m.RLocker().TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Unlock(ctx)
}

func TestRWMutexBadInput(t *testing.T) {
	if _, err := redislock.NewRWMutex(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewRWMutex(nil): %v", err)
	}
	if _, err := redislock.NewRWMutex(newRDB(t, srv.Addr), dlock.WithTTL(0)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewRWMutex with a bad option: %v", err)
	}
	var nilRW *redislock.RWMutex
	if nilRW.RLocker() != nil {
		t.Error("nil RWMutex has an RLocker")
	}
	ctx := context.Background()
	m := newRWMutex(t, newRDB(t, srv.Addr))
	if _, err := m.RLocker().TryLock(ctx, "a{b"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("read TryLock of a bad key: %v", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := m.Downgrade(nil, nil); !errors.Is(err, dlock.ErrInvalid) { //nolint:staticcheck
		t.Errorf("Downgrade(nil ctx): %v", err)
	}
	// A key used as a read-write lock is no mutex and no semaphore.
	key := dlocktest.Key(t)
	r, err := m.RLocker().TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx)
	if _, err := newClient(t).TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("mutex on a read-write lock: %v", err)
	}
	if _, err := newSemaphore(t, newRDB(t, srv.Addr), 2).TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("semaphore on a read-write lock: %v", err)
	}
	info, err := m.RLocker().Inspect(ctx, key)
	if err != nil || info.Holders != 1 || info.Limit != 0 || info.Owner != r.Owner() {
		t.Errorf("Inspect of a read lock: %+v, %v", info, err)
	}
}

// TestRWMutexReadersNotStarvedByWriters: a reader waiting through a stream of
// writers in other Clients gets in at the next writer's release.
func TestRWMutexReadersNotStarvedByWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	stop := make(chan struct{})
	var g errgroup.Group
	for i := 0; i < 3; i++ {
		w := newRWMutex(t, newRDB(t, srv.Addr))
		g.Go(func() error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				l, err := w.Lock(ctx, key, dlock.WithTTL(5*time.Second))
				if err != nil {
					return err
				}
				time.Sleep(10 * time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					return err
				}
			}
		})
	}
	r := newRWMutex(t, newRDB(t, srv.Addr)).RLocker()
	for i := 0; i < 5; i++ {
		start := time.Now()
		l, err := r.Lock(ctx, key, dlock.WithWait(2*time.Second))
		if err != nil {
			close(stop)
			_ = g.Wait()
			t.Fatalf("reader %d starved by writers: %v", i, err)
		}
		t.Logf("reader %d in after %v", i, time.Since(start).Round(time.Millisecond))
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// Downgrade of a lease that is not a write lease of a read-write lock (a read
// lease, a plain or reentrant mutex's lease) is refused with dlock.ErrInvalid,
// and the lease stays held.
func TestRWMutexDowngradeOtherLeases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	m := newRWMutex(t, newRDB(t, srv.Addr))
	r, err := m.RLocker().TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := newClient(t).TryLock(ctx, key+":plain")
	if err != nil {
		t.Fatal(err)
	}
	re, err := newReentrant(t).TryLock(ctx, key+":reentrant")
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*dlock.Lease{"read lease": r, "plain mutex lease": plain, "reentrant lease": re} {
		if d, err := m.Downgrade(ctx, l); !errors.Is(err, dlock.ErrInvalid) || d != nil {
			t.Errorf("Downgrade of a %s: %v, %v; want dlock.ErrInvalid", name, d, err)
		}
		if err := l.Err(); err != nil {
			t.Errorf("%s after a refused Downgrade: %v", name, err)
		}
		if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
			t.Errorf("%s after a refused Downgrade: TTL %v, %v", name, ttl, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock after a refused Downgrade: %v", name, err)
		}
	}
	if n := newRDB(t, srv.Addr).Exists(ctx, redislock.LockKey(key)).Val(); n != 0 {
		t.Errorf("the read-write lock is still there after its only reader left")
	}
}
