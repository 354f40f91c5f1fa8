package legacy_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

var srv *testserver.Redis

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r }))
}

func newRDB(t testing.TB) *redis.Client { return testserver.RedisClient(t, srv.Addr) }

func newLegacy(t testing.TB, f legacy.Format, opts ...dlock.Option) *legacy.Client {
	t.Helper()
	c, err := legacy.New(newRDB(t), f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// occupy stores a value that is not a stamp in f's unit where the lock lives.
func occupy(f legacy.Format, value string) func(t testing.TB, key string) func() bool {
	return func(t testing.TB, key string) func() bool {
		rdb := newRDB(t)
		ctx := context.Background()
		k := key
		if f.Key != nil {
			k = f.Key(key)
		}
		if err := rdb.Set(ctx, k, value, 0).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Del(context.Background(), k) })
		return func() bool {
			v, err := rdb.Get(ctx, k).Result()
			return err == nil && v == value && rdb.PTTL(ctx, k).Val() == -1
		}
	}
}

func TestConformance(t *testing.T) {
	formats := []struct {
		name string
		f    legacy.Format
		// occupant is foreign data for the format: not a stamp in its unit.
		occupant string
		skip     map[string]string
	}{
		{name: "millis", f: legacy.Format{Key: legacy.Suffix("_lock")}, occupant: "1700000000"},
		{
			name: "seconds", f: legacy.Format{Key: legacy.Prefix("lock."), Unit: time.Second, Expire: true}, occupant: "1700000000000",
			skip: map[string]string{
				// A stamp in whole seconds says when the lock runs out to the second:
				// the time left it reports can be up to a second under the TTL asked for.
				"TTLReportsServerTime": "stamps in seconds give the time left to a second only",
			},
		},
	}
	for _, tc := range formats {
		t.Run(tc.name, func(t *testing.T) {
			dlocktest.Run(t, dlocktest.Backend{
				Info: driver.DriverInfo{Backend: "legacy", Kind: driver.KindMutex},
				New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
					return newLegacy(t, tc.f, opts...)
				},
				Occupy: occupy(tc.f, tc.occupant),
				Skip:   tc.skip,
			})
		})
	}
}

func TestFormatErrors(t *testing.T) {
	var nilRDB *redis.Client
	if _, err := legacy.New(nilRDB, legacy.Format{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := legacy.NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
	rdb := newRDB(t)
	bad := map[string]legacy.Format{
		"unit 1m":            {Unit: time.Minute},
		"unit 10ms":          {Unit: 10 * time.Millisecond},
		"clock and server":   {Clock: time.Now, ServerClock: true},
		"negative unit":      {Unit: -time.Second},
		"microsecond stamps": {Unit: time.Microsecond},
	}
	for name, f := range bad {
		if _, err := legacy.New(rdb, f); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := legacy.New(rdb, legacy.Format{}, dlock.WithTTL(0)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("bad option: %v", err)
	}
	// Key names dlock cannot put a companion beside, or empty ones: ErrInvalid, no I/O.
	ctx := ctxT(t, 5*time.Second)
	for _, f := range []func(string) string{
		func(string) string { return "" },
		func(k string) string { return "a}" + k },
		func(k string) string { return "{}" + k },
	} {
		c, err := legacy.New(rdb, legacy.Format{Key: f})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("key %q: %v, want ErrInvalid", f("k"), err)
		}
	}
}

func TestCompanionKeySharesSlot(t *testing.T) {
	for _, tc := range []struct{ lock, companion string }{
		{"lock.foo", "{lock.foo}:dlock"},
		{"foo_lock", "{foo_lock}:dlock"},
		{"lock_goods:{300}", "{300}:dlock:lock_goods:{300}"},
		{"a{b", "{a{b}:dlock"},
		{"x}{y}", "{y}:dlock:x}{y}"},
	} {
		got, err := legacy.CompanionKey(tc.lock)
		if err != nil || got != tc.companion {
			t.Errorf("CompanionKey(%q) = %q, %v; want %q", tc.lock, got, err, tc.companion)
		}
	}
	for _, k := range []string{"a}b", "{}x", "}{"} {
		if _, err := legacy.CompanionKey(k); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("CompanionKey(%q): %v, want ErrInvalid", k, err)
		}
	}
}

// TestStampFormat checks the stamp written in each unit: the recipes' expiry
// plus one unit, a decimal integer every old client parses.
func TestStampFormat(t *testing.T) {
	rdb := newRDB(t)
	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct {
		unit        time.Duration
		ttl         time.Duration
		serverClock bool
	}{{time.Millisecond, 3 * time.Second, false}, {time.Second, 3 * time.Second, false}, {time.Second, 1500 * time.Millisecond, false},
		{time.Millisecond, 3 * time.Second, true}, {time.Second, 1500 * time.Millisecond, true}} {
		key := dlocktest.Key(t)
		c := newLegacy(t, legacy.Format{Key: legacy.Prefix("lock."), Unit: tc.unit, ServerClock: tc.serverClock})
		before := time.Now()
		l, err := c.TryLock(ctx, key, dlock.WithTTL(tc.ttl))
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		v, err := rdb.Get(ctx, "lock."+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("stamp %q is not an integer: %v", v, err)
		}
		u := int64(tc.unit / time.Millisecond)
		lo, hi := before.Add(tc.ttl).UnixMilli()/u+1, after.Add(tc.ttl).UnixMilli()/u+1
		if s < lo || s > hi {
			t.Errorf("unit %v ttl %v: stamp %d, want in [%d, %d]", tc.unit, tc.ttl, s, lo, hi)
		}
		if ttl := rdb.PTTL(ctx, "lock."+key).Val(); ttl != -1 {
			t.Errorf("stamp key has an expiry (%v) without Format.Expire", ttl)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := rdb.Exists(ctx, "lock."+key).Val(); n != 0 {
			t.Errorf("lock key left after Unlock")
		}
	}
}

// TestWrongTypeTouchesNothing: a lock key of another Redis type is ErrConflict
// and stays as it was.
func TestWrongTypeTouchesNothing(t *testing.T) {
	rdb := newRDB(t)
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	if err := rdb.HSet(ctx, key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	c := newLegacy(t, legacy.Format{})
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("TryLock on a hash: %v, want ErrConflict", err)
	}
	if v := rdb.HGet(ctx, key, "f").Val(); v != "v" {
		t.Fatalf("hash changed: %q", v)
	}
	comp, _ := legacy.CompanionKey(key)
	if n := rdb.Exists(ctx, comp).Val(); n != 0 {
		t.Fatalf("companion created for a conflicting key")
	}
}

// TestExpireSafetyNet: with Format.Expire the key gets a real expiry one unit
// after its stamp, so a holder that never unlocks leaves nothing behind.
func TestExpireSafetyNet(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	rdb := newRDB(t)
	key := dlocktest.Key(t)
	c := newLegacy(t, legacy.Format{Expire: true})
	l, err := c.TryLock(ctx, key, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if p := rdb.PTTL(ctx, key).Val(); p <= 0 || p > 302*time.Millisecond {
		t.Fatalf("PTTL %v, want in (0, 302ms]", p)
	}
	<-l.Done() // the holder "crashes": no Unlock
	for rdb.Exists(ctx, key).Val() == 1 {
		select {
		case <-ctx.Done():
			t.Fatal("key still there")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestRenewInSecondsKeepsPace: renewing a seconds lease more often than once a
// second does not push its stamp ahead of now+ttl (Extend never moves a stamp
// back, but does not add a unit either when it would write the same one).
func TestRenewInSecondsKeepsPace(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	rdb := newRDB(t)
	key := dlocktest.Key(t)
	c := newLegacy(t, legacy.Format{Unit: time.Second})
	l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := l.Extend(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	s, err := rdb.Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if max := time.Now().Add(time.Second).Unix() + 1; s > max {
		t.Fatalf("stamp %d after 10 quick renewals, want at most %d", s, max)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// FuzzForeignValue: whatever string the lock key holds, an attempt either
// treats it as a stamp in the unit (taking it over or waiting) or reports
// dlock.ErrConflict and leaves it as it was; it never fails otherwise.
func FuzzForeignValue(f *testing.F) {
	for _, s := range []string{"", "0", "1", "-5", "+5", "1.5", " 1700000000000", "1700000000000", "1700000000",
		"99999999999999999999", "999999999999999", "1e12", "0x10", "abc", "١٧٠٠٠٠٠٠٠٠٠٠٠", "170000000000\x00"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, v string, seconds bool) {
		rdb := newRDB(t)
		ctx := ctxT(t, 10*time.Second)
		key := dlocktest.Key(t)
		if err := rdb.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		defer rdb.Del(context.Background(), key)
		f := legacy.Format{}
		if seconds {
			f.Unit = time.Second
		}
		l, err := newLegacy(t, f).TryLock(ctx, key)
		switch {
		case err == nil:
			_ = l.Unlock(ctx)
		case errors.Is(err, dlock.ErrConflict):
			if got := rdb.Get(ctx, key).Val(); got != v {
				t.Fatalf("conflicting value %q changed to %q", v, got)
			}
		case errors.Is(err, dlock.ErrNotObtained):
		default:
			t.Fatalf("value %q: %v", v, err)
		}
		n, perr := strconv.ParseUint(v, 10, 64)
		valid := perr == nil && len(v) <= 15 && v[0] != '+'
		if seconds {
			valid = valid && n < 100_000_000_000
		} else {
			valid = valid && n >= 100_000_000_000
		}
		if valid == errors.Is(err, dlock.ErrConflict) {
			t.Fatalf("value %q (valid stamp %v): %v", v, valid, err)
		}
	})
}

// TestStampFollowsEachLease: a short lease after a long one on the same key gets
// a stamp for its own TTL, not one above the earlier lease's.
func TestStampFollowsEachLease(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	rdb := newRDB(t)
	key := dlocktest.Key(t)
	c := newLegacy(t, legacy.Format{})
	long, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	short, err := c.TryLock(ctx, key, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := rdb.Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if max := time.Now().Add(time.Second).UnixMilli() + 1; s > max {
		t.Fatalf("stamp %v after a 1s TryLock, want at most %v", time.UnixMilli(s), time.UnixMilli(max))
	}
	if ttl, err := short.TTL(ctx); err != nil || ttl > time.Second {
		t.Fatalf("TTL %v %v", ttl, err)
	}
	if err := short.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireIsIdempotentForItsOwner: a second attempt by the owner that holds
// the lock (its first reply was lost) gets the same holding and token back.
func TestAcquireIsIdempotentForItsOwner(t *testing.T) {
	for _, f := range []legacy.Format{{}, {Unit: time.Second}} {
		d, err := legacy.NewDriver(newRDB(t), f)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		key := dlocktest.Key(t)
		r := driver.AcquireRequest{Key: key, Owner: "0123456789abcdef0123456789abcdef", TTL: 3 * time.Second}
		g1, err := d.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		g2, err := d.Acquire(ctx, r)
		if err != nil || g2.Token != g1.Token {
			t.Fatalf("retry by the holder: %+v, %v; want token %d", g2, err, g1.Token)
		}
		r.Owner = "ffffffffffffffffffffffffffffffff"
		if _, err := d.Acquire(ctx, r); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("another owner: %v, want busy", err)
		}
		if err := d.Release(ctx, driver.Holding{Key: key, Owner: "0123456789abcdef0123456789abcdef"}); err != nil {
			t.Fatal(err)
		}
	}
}
