//go:build linux

package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestVerifyRefusesWithoutPrefix(t *testing.T) {
	for _, args := range [][]string{
		{"verify", "--duration", "1s"},
		{"verify", "--prefix", "", "--duration", "1s"},
		{"verify", "--prefix", "a*", "--duration", "1s"},
	} {
		r := dlockRun(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--prefix") {
			t.Errorf("dlock %v: exit %d, stderr %q; want 64 and a word on --prefix", args, r.code, r.stderr)
		}
	}
}

// verifyKeys returns every key of the Redis server at addr with its value
// (its type for what is not a string).
func verifyKeys(t *testing.T, addr string) map[string]string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		if err != nil {
			v = "type " + rdb.Type(ctx, k).Val()
		}
		out[k] = v
	}
	return out
}

// TestVerifyOnRedis runs dlock verify on a Redis that holds other keys, a lock
// of another name among them: every property holds, the history is written,
// and the server ends with exactly the keys it had.
func TestVerifyOnRedis(t *testing.T) {
	s := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	ctx := context.Background()
	for k, v := range map[string]string{"app:counter": "41", "vt:plain": "x", "dlock:{vt}": "not ours", "dlock:{other}:fence": "7"} {
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.HSet(ctx, "dlock:{held-elsewhere}", "owner", "someone").Err(); err != nil {
		t.Fatal(err)
	}
	before := verifyKeys(t, s.Addr)
	hist := filepath.Join(t.TempDir(), "h.jsonl")
	r := dlockRun(t, "verify", "--prefix", "vt:", "--duration", "5s", "--ttl", "1s", "--redis", "redis://"+s.Addr+"/0", "--history", hist)
	if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, p := range []string{"fencing", "exclusion", "told-first", "linearizable", "leftover"} {
		if !strings.Contains(r.stdout, "PASS  "+p) {
			t.Errorf("no PASS line for %s:\n%s", p, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "seed ") {
		t.Errorf("no seed printed:\n%s", r.stdout)
	}
	if b, err := os.ReadFile(hist); err != nil || !strings.Contains(string(b), `"op":"write"`) {
		t.Errorf("history %s: %v, %d bytes, no write", hist, err, len(b))
	}
	after := verifyKeys(t, s.Addr)
	if !maps.Equal(before, after) {
		t.Errorf("keys before: %v\nafter: %v", before, after)
	}
}

// TestVerifyOnConsensusStores runs dlock verify on etcd and PostgreSQL (whose
// connections go through its proxy): every property holds, and nothing is
// left under the prefix.
func TestVerifyOnConsensusStores(t *testing.T) {
	for _, tc := range []struct{ name, flag string }{{"etcd", "--etcd"}, {"postgres", "--postgres"}} {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			if tc.name == "etcd" {
				url = testserver.StartEtcd(t).ClientURL
			} else {
				url = testserver.StartPostgres(t).URL
			}
			r := dlockRun(t, "verify", "--prefix", "vt-", "--duration", "4s", "--ttl", "1s", tc.flag, url)
			if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") || !strings.Contains(r.stdout, "faults: stop,kill,reset,delay") {
				t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if left := consensusLeft(t, tc.name, url); len(left) > 0 {
				t.Errorf("left under the prefix: %v", left)
			}
		})
	}
}

// consensusLeft returns the entries of the locks named vt-* on the etcd or
// PostgreSQL at url: etcd keys, or rows of the locks' table.
func consensusLeft(t *testing.T, backend, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var left []string
	if backend == "etcd" {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if strings.Contains(string(kv.Key), "vt-") {
				left = append(left, string(kv.Key))
			}
		}
		return left
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT key FROM "+pglock.DefaultTable+" WHERE key LIKE 'vt-%'")
	if err != nil {
		t.Fatal(err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return left
}
