package natslock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go/jetstream"
)

func TestBadInputIsInvalid(t *testing.T) {
	js := connect(t, srv.URL)
	if _, err := New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
	for _, bad := range [][]Option{{WithBucket("")}, {WithBucket("a.b")}, {WithBucket("a b")}, {WithBucket(strings.Repeat("b", 65))},
		{WithRequestTimeout(0)}, {WithReplicas(0)}, {WithReplicas(6)}, {nil}} {
		if _, err := NewDriver(js, bad...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewDriver with bad options: %v", err)
		}
	}
	// A bucket that does not exist: a key NATS cannot hold is refused
	// before the Driver looks for it.
	d, err := NewDriver(js, WithBucket("never_created"))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewClient(d)
	ctx := ctxT(t, 10*time.Second)
	for _, key := range []string{"orders:42", "a b", "a..b", ".a", "a.", "a*", "a>", "ключ", strings.Repeat("k", MaxKeyLen+1)} {
		if l, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrInvalid) || !errors.Is(err, ErrBadKey) || l != nil {
			t.Errorf("key %q: %v, want ErrBadKey", key, err)
		}
		if _, err := d.Inspect(ctx, key); !errors.Is(err, ErrBadKey) {
			t.Errorf("Inspect(%q): %v, want ErrBadKey", key, err)
		}
		if _, err := d.ForceUnlock(ctx, key); !errors.Is(err, ErrBadKey) {
			t.Errorf("ForceUnlock(%q): %v, want ErrBadKey", key, err)
		}
	}
	if err := CheckKey(strings.Repeat("k", MaxKeyLen)); err != nil {
		t.Errorf("a key of MaxKeyLen bytes: %v", err)
	}
	if _, err := c.TryLock(ctx, "fine.key"); !errors.Is(err, ErrNoBucket) || !errors.Is(err, dlock.ErrRefused) {
		t.Errorf("missing bucket: %v, want ErrNoBucket", err)
	}
	var nd *Driver
	if _, err := nd.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil driver: %v", err)
	}
	if err := nd.Migrate(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil driver Migrate: %v", err)
	}
	// TTLs count whole seconds from one: shorter ones are rounded up.
	if l, err := newClient(t).TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(500*time.Millisecond)); err != nil || time.Until(l.Deadline()) < 900*time.Millisecond {
		t.Errorf("TTL 500ms: %v, want a lease of 1s", err)
	} else {
		_ = l.Unlock(ctx)
	}
	// Kinds the backend does not keep are refused before any I/O.
	if _, err := c.TryLock(ctx, "fine.key", dlock.WithLockDelay(time.Second)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("lock-delay: %v, want ErrUnsupported", err)
	}
}

// createBucket creates a bucket of cfg for one test, deleted when it ends.
func createBucket(t *testing.T, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateKeyValue(ctxT(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteKeyValue(ctxT(t, 10*time.Second), cfg.Bucket) })
	return kv
}

// TestBucketsThatCannotKeepALock: a bucket without per-key TTLs, or one that
// a restart forgets, is refused with a typed error at the first call, and
// nothing is written to it.
func TestBucketsThatCannotKeepALock(t *testing.T) {
	js := connect(t, srv.URL)
	cases := []struct {
		name string
		cfg  jetstream.KeyValueConfig
		opts []Option
		want error
	}{
		{"no-ttl", jetstream.KeyValueConfig{Bucket: "no_ttl", Storage: jetstream.FileStorage}, nil, ErrNoKeyTTL},
		{"memory", jetstream.KeyValueConfig{Bucket: "in_memory", Storage: jetstream.MemoryStorage, LimitMarkerTTL: time.Minute}, nil, ErrNotDurable},
		{"memory-volatile", jetstream.KeyValueConfig{Bucket: "in_memory_ok", Storage: jetstream.MemoryStorage, LimitMarkerTTL: time.Minute}, []Option{WithVolatile()}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kv := createBucket(t, js, tc.cfg)
			d, err := NewDriver(js, append([]Option{WithBucket(tc.cfg.Bucket)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Close)
			c, _ := NewClient(d)
			ctx := ctxT(t, 10*time.Second)
			l, err := c.TryLock(ctx, "some.key", dlock.WithTTL(time.Second))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				_ = l.Unlock(ctx)
				return
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrRefused) {
				t.Fatalf("TryLock: %v, want %v", err, tc.want)
			}
			if err := d.Check(ctx); !errors.Is(err, tc.want) {
				t.Errorf("Check: %v, want %v", err, tc.want)
			}
			if st, err := kv.Status(ctx); err != nil || st.Values() != 0 {
				t.Errorf("the bucket holds %d values (%v), want none", st.Values(), err)
			}
		})
	}
}

func TestServerVersion(t *testing.T) {
	for v, want := range map[string]error{"2.10.29": ErrOldServer, "1.4.0": ErrOldServer, "2.11.0": nil, "2.15.2": nil, "3.0.0": nil, "v2.12.1-beta": nil, "junk": ErrOldServer, "": dlock.ErrUnavailable} {
		if err := checkVersion(v); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("version %q: %v, want %v", v, err, want)
		}
	}
	if err := checkVersion("2.10.0"); !errors.Is(err, dlock.ErrRefused) {
		t.Errorf("old server: %v, want ErrRefused", err)
	}
}
