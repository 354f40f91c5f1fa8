package redislock_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

var srv *testserver.Redis

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r }))
}

func newRDB(t testing.TB, addr string) *redis.Client { return testserver.RedisClient(t, addr) }

func newClient(t testing.TB, opts ...dlock.Option) *redislock.Client {
	c, err := redislock.New(newRDB(t, srv.Addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindMutex},
		New:  func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newClient(t, opts...) },
		Occupy: func(t testing.TB, key string) func() bool {
			rdb := newRDB(t, srv.Addr)
			k := redislock.LockKey(key)
			if err := rdb.RPush(context.Background(), k, "a", "b").Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Del(context.Background(), k) })
			return func() bool {
				v, err := rdb.LRange(context.Background(), k, 0, -1).Result()
				ttl := rdb.PTTL(context.Background(), k).Val()
				return err == nil && len(v) == 2 && v[0] == "a" && ttl == -1
			}
		},
	})
}

func TestNewRejectsNilClient(t *testing.T) {
	var nilClient *redis.Client
	for _, c := range []redis.UniversalClient{nil, nilClient, (*redis.ClusterClient)(nil)} {
		if _, err := redislock.New(c); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("New(%T nil): %v, want ErrInvalid", c, err)
		}
	}
	if _, err := redislock.New(newRDB(t, srv.Addr), dlock.WithTTL(0)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New with bad default: %v", err)
	}
	// Every kind's driver takes Options, and refuses a nil one, or one that
	// is not for its kind.
	rdb := newRDB(t, srv.Addr)
	for _, o := range []redislock.Option{nil, redislock.WithReplicaAck(1, time.Second)} {
		if _, err := redislock.NewFairDriver(rdb, o); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewFairDriver with a bad option: %v, want ErrInvalid", err)
		}
		if _, err := redislock.NewSemaphoreDriver(rdb, 2, o); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewSemaphoreDriver with a bad option: %v, want ErrInvalid", err)
		}
		if _, err := redislock.NewReentrantDriver(rdb, o); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewReentrantDriver with a bad option: %v, want ErrInvalid", err)
		}
	}
	if _, err := redislock.NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil): %v, want ErrInvalid", err)
	}
}

func TestForeignHashIsConflict(t *testing.T) {
	rdb := newRDB(t, srv.Addr)
	ctx := context.Background()
	key := dlocktest.Key(t)
	k := redislock.LockKey(key)
	rdb.HSet(ctx, k, "user", "data")
	defer rdb.Del(ctx, k)
	c := newClient(t)
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("TryLock on a foreign hash: %v", err)
	}
	if _, err := c.Lock(ctx, key, dlock.WithWait(time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("Lock on a foreign hash: %v", err)
	}
	if v := rdb.HGetAll(ctx, k).Val(); len(v) != 1 || v["user"] != "data" || rdb.PTTL(ctx, k).Val() != -1 {
		t.Fatalf("foreign hash changed: %v", v)
	}
}

func TestLockKeysShareHashSlot(t *testing.T) {
	for _, key := range []string{"a", "orders:42", "x:fence", "ключ", "a b"} {
		lk, fk := redislock.LockKey(key), redislock.FenceKey(key)
		if slot(lk) != slot(fk) {
			t.Errorf("%q: lock key %q and fence key %q in different slots", key, lk, fk)
		}
	}
	if redislock.FenceKey("x") == redislock.LockKey("x:fence") {
		t.Error("fence key of x collides with lock key of x:fence")
	}
}

// slot is the Redis Cluster hash-tag rule: the part between the first '{' and the
// next '}', when non-empty, is what is hashed.
func slot(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] == '{' {
			for j := i + 1; j < len(k); j++ {
				if k[j] == '}' {
					if j > i+1 {
						return k[i+1 : j]
					}
					return k
				}
			}
			return k
		}
	}
	return k
}

func TestEveryLockKeyHasExpiry(t *testing.T) {
	rdb := newRDB(t, srv.Addr)
	ctx := context.Background()
	c := newClient(t)
	key := dlocktest.Key(t)
	l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute), dlock.WithMetadata("host=a pid=1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	for _, k := range rdb.Keys(ctx, redislock.Prefix+"{"+key+"}*").Val() {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has PTTL %v", k, ttl)
		}
	}
	v := rdb.Get(ctx, redislock.LockKey(key)).Val()
	if r, ok := redislock.ParseRecord(v); !ok || r.Owner != l.Owner() || r.Metadata != "host=a pid=1" || r.Token != l.Token() {
		t.Errorf("lock record %q", v)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, redislock.LockKey(key)).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("released lock record has PTTL %v, want what was left of the holding's TTL", ttl)
	}
}

func TestScriptFlushBetweenCalls(t *testing.T) {
	rdb := newRDB(t, srv.Addr)
	ctx := context.Background()
	c := newClient(t)
	key := dlocktest.Key(t)
	for i := 0; i < 3; i++ {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
		}
		rdb.ScriptFlush(ctx)
		if err := l.Extend(ctx, 2*time.Second); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
		rdb.ScriptFlush(ctx)
		if _, err := l.TTL(ctx); err != nil {
			t.Fatalf("TTL after SCRIPT FLUSH: %v", err)
		}
		rdb.ScriptFlush(ctx)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
		}
	}
}

func TestUnreachableServer(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rdb := newRDB(t, net.JoinHostPort("127.0.0.1", itoa(port)))
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	for _, f := range []func(context.Context, string, ...dlock.Option) (*dlock.Lease, error){c.TryLock, c.Lock} {
		_, err = f(ctx, "k")
		if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("lock on a closed port: %v, want ErrUnavailable and not ErrNotObtained", err)
		}
		var op *net.OpError
		if !errors.As(err, &op) {
			t.Errorf("cause not wrapped: %v", err)
		}
	}
	// Lock retries until the context ends. go-redis retries a refused dial a few
	// times (DialerRetries) without watching the context: allow one such round.
	if el := time.Since(start); el > 2*time.Second+time.Second {
		t.Errorf("took %v, well beyond the context deadline", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock: %v, want the context's error too", err)
	}
}

func itoa(n int) string {
	b := []byte{}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// TestFencingSurvivesRestart: tokens handed out after the server lost all its data
// are still larger than every token handed out before.
func TestFencingSurvivesRestart(t *testing.T) {
	s := testserver.StartRedis(t)
	c, err := redislock.New(newRDB(t, s.Addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := dlocktest.Key(t)
	var last uint64
	for i := 0; i < 5; i++ {
		l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		l.Unlock(ctx)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	for i := 0; err != nil && errors.Is(err, dlock.ErrUnavailable) && i < 3; i++ {
		l, err = c.TryLock(ctx, key, dlock.WithTTL(time.Minute)) // the pool's old connections die first
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if l.Token() <= last {
		t.Fatalf("token after restart %d not above %d", l.Token(), last)
	}
}

// TestFenceCounterAheadOfClock checks both ways the acquire scripts (plain and
// fair) compute a fencing token: one above a counter that is ahead of the server
// clock, and the server time in microseconds once the counter is gone.
func TestFenceCounterAheadOfClock(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		rdb := newRDB(t, srv.Addr)
		ctx := context.Background()
		c, _ := counted(t, fair, dlock.WithTTL(time.Second))
		key := dlocktest.Key(t)
		const ahead = 8_000_000_000_000_000 // µs, far beyond the clock, below 2^53
		if err := rdb.Set(ctx, redislock.FenceKey(key), ahead, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() != ahead+1 {
			t.Errorf("token over a counter at %d = %d, want %d", uint64(ahead), l.Token(), uint64(ahead+1))
		}
		if fair {
			if v, _ := rdb.Get(ctx, redislock.FenceKey(key)).Uint64(); v != ahead+1 {
				t.Errorf("fence counter = %d, want %d", v, uint64(ahead+1))
			}
			if ttl := rdb.PTTL(ctx, redislock.FenceKey(key)).Val(); ttl <= time.Minute {
				t.Errorf("fence counter PTTL %v, want the retention (%v)", ttl, redislock.FenceRetention)
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if !fair {
			// The plain lock counts in its lock record, kept after the release.
			if r, _ := redislock.ParseRecord(rdb.Get(ctx, redislock.LockKey(key)).Val()); r.Token != ahead+1 || r.Owner != "" {
				t.Errorf("released lock record %+v, want token %d", r, uint64(ahead+1))
			}
			l, err := c.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if l.Token() != ahead+2 {
				t.Errorf("token over a released record at %d = %d, want %d", uint64(ahead+1), l.Token(), uint64(ahead+2))
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}

		// Without the counter the token is the server time. Twice: once early in a
		// second of the server clock, whose microseconds have fewer digits.
		for round := range 2 {
			rdb.Del(ctx, redislock.FenceKey(key), redislock.LockKey(key))
			var before time.Time
			for i := 0; ; i++ {
				if before, err = rdb.Time(ctx).Result(); err != nil {
					t.Fatal(err)
				}
				if round == 1 || before.Nanosecond() < 50_000_000 || i == 400 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			l, err = c.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if min := uint64(before.UnixMicro()); l.Token() < min || l.Token() >= ahead {
				t.Errorf("token without a counter = %d, want the server time in µs (at least %d)", l.Token(), min)
			}
			want := strconv.FormatUint(l.Token(), 10)
			if fair {
				if v := rdb.Get(ctx, redislock.FenceKey(key)).Val(); v != want {
					t.Errorf("fence counter = %q, want the token %s", v, want)
				}
				if v := rdb.HGet(ctx, redislock.LockKey(key), "t").Val(); v != want {
					t.Errorf("token field = %q, want %s", v, want)
				}
			} else if r, _ := redislock.ParseRecord(rdb.Get(ctx, redislock.LockKey(key)).Val()); r.Token != l.Token() {
				t.Errorf("lock record %+v, want the token %s", r, want)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if t.Failed() {
				return
			}
		}
	})
}
