package redislock_test

import (
	"context"
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
	server := testserver.StartRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction", "--enable-debug-command", "yes")
	rdb := newRDB(t, server.Addr)
	ctx := context.Background()
	kinds := []struct {
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
	type held struct {
		name, key string
		c         *redislock.Client
		l         *dlock.Lease
	}
	var leases []held
	for _, k := range kinds {
		c, err := k.client(rdb)
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t) + ":" + k.name
		l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		leases = append(leases, held{k.name, key, c, l})
	}
	if err := rdb.Do(ctx, "DEBUG", "POPULATE", 60000, "filler:", 64).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "filler:probe", "x", 0).Err(); err == nil || !isOOM(err) {
		t.Fatalf("the server is not full: SET gave %v", err)
	}
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

func isOOM(err error) bool {
	return err != nil && len(err.Error()) >= 3 && err.Error()[:3] == "OOM"
}
