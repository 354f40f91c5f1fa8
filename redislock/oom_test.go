package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestUnlockOnAFullServer: a server out of memory (noeviction) refuses every
// write that could grow it, but a release must still free the lock, of every
// kind, at once rather than at its TTL.
func TestUnlockOnAFullServer(t *testing.T) {
	ctx := context.Background()
	leases := holdingsOnAFullServer(t)
	for _, h := range leases {
		if err := h.l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock on a full server: %v", h.name, err)
			continue
		}
		info, err := h.c.Inspect(ctx, h.key)
		if err != nil {
			t.Errorf("%s: Inspect: %v", h.name, err)
		} else if info.Held {
			t.Errorf("%s: still held (%+v) after Unlock on a full server", h.name, info)
		}
	}
}

// fullKinds are the lock kinds tested on a full server.
var fullKinds = []struct {
	name   string
	client func(rdb *redis.Client) (*redislock.Client, error)
}{
	{"plain", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.New(rdb) }},
	{"fair", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.NewFair(rdb) }},
	{"reentrant", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.NewReentrant(rdb) }},
	{"rw", func(rdb *redis.Client) (*redislock.Client, error) {
		m, err := redislock.NewRWMutex(rdb)
		if err != nil {
			return nil, err
		}
		return m.Client, nil
	}},
	{"semaphore", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.NewSemaphore(rdb, 1) }},
}

// fullHolding is a holding of one kind, taken before the server filled up.
type fullHolding struct {
	name, key string
	c         *redislock.Client
	l         *dlock.Lease
}

// holdingsOnAFullServer starts a server of the test's own, takes a lock of
// each of fullKinds there for a minute, and fills the server until it refuses
// a SET for lack of memory (noeviction).
func holdingsOnAFullServer(t *testing.T) []fullHolding {
	t.Helper()
	server := testserver.StartRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction", "--enable-debug-command", "yes")
	rdb := newRDB(t, server.Addr)
	var leases []fullHolding
	for _, k := range fullKinds {
		c, err := k.client(rdb)
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t) + ":" + k.name
		l, err := c.TryLock(context.Background(), key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		leases = append(leases, fullHolding{k.name, key, c, l})
	}
	ctx := context.Background()
	if err := rdb.Do(ctx, "DEBUG", "POPULATE", 60000, "filler:", 64).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "filler:probe", "x", 0).Err(); err == nil || !isOOM(err) {
		t.Fatalf("the server is not full: SET gave %v", err)
	}
	return leases
}

// TestNewAcquisitionOnAFullServer: a server out of memory (noeviction) refuses
// a new acquisition of every kind with ErrUnavailable, as it refuses any write
// that grows it, whatever the script wrote before its first write that grows
// it; the holdings taken before it filled up are still renewed and released.
func TestNewAcquisitionOnAFullServer(t *testing.T) {
	ctx := context.Background()
	leases := holdingsOnAFullServer(t)
	for _, h := range leases {
		for _, key := range []string{h.key + ":new", "new-" + h.name} {
			l, err := h.c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
			if err == nil {
				t.Errorf("%s: a new acquisition of %q on a full server succeeded", h.name, key)
				_ = l.Unlock(ctx)
			} else if !errors.Is(err, dlock.ErrUnavailable) {
				t.Errorf("%s: a new acquisition on a full server: %v, want ErrUnavailable", h.name, err)
			}
		}
		if err := h.l.Extend(ctx, 2*time.Minute); err != nil {
			t.Errorf("%s: Extend on a full server: %v", h.name, err)
		}
		if err := h.l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock on a full server: %v", h.name, err)
		}
	}
}

func isOOM(err error) bool {
	return err != nil && len(err.Error()) >= 3 && err.Error()[:3] == "OOM"
}
