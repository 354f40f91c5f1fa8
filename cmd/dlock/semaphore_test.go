package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestSemaphoreResize: "dlock semaphore resize" changes the permits that runs
// started with another -n take, and refuses bad input and other kinds of lock.
func TestSemaphoreResize(t *testing.T) {
	key := syncName(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	t.Cleanup(func() { rdb.Del(context.Background(), redislock.SizeKey(key)) })
	for _, args := range [][]string{
		{"semaphore", "resize", key},
		{"semaphore", "resize", key, "0"},
		{"semaphore", "resize", key, "two"},
		{"semaphore", "grow", key, "2"},
		{"semaphore", "resize", "", "2"},
	} {
		if r := dlockRun(t, args...); r.code != exitUsage {
			t.Errorf("dlock %v: %+v, want exit 64", args, r)
		}
	}
	if r := dlockRun(t, "semaphore", "resize", key, "1"); r.code != 0 {
		t.Fatalf("resize to 1: %+v", r)
	}
	// Runs started with -n 2 take one permit, whatever their -n.
	second := []string{dlockBin, "run", "-n", "2", "--wait", "0", key, "--", "true"}
	if r := dlockRun(t, append([]string{"run", "-n", "2", key, "--"}, second...)...); r.code != exitNotObtained {
		t.Fatalf("a second run on a semaphore resized to 1: %+v, want exit 75", r)
	}
	if r := dlockRun(t, "semaphore", "resize", key, "2"); r.code != 0 {
		t.Fatalf("resize to 2: %+v", r)
	}
	if r := dlockRun(t, append([]string{"run", "-n", "2", key, "--"}, second...)...); r.code != 0 {
		t.Fatalf("two runs on a semaphore resized to 2: %+v", r)
	}
	status := []string{dlockBin, "status", key}
	if r := dlockRun(t, append([]string{"run", "-n", "2", key, "--"}, status...)...); r.code != 0 || !strings.Contains(r.stdout, "1 of 2") {
		t.Fatalf("status of a semaphore resized to 2: %+v, want 1 of 2", r)
	}
	if r := dlockRun(t, "run", "-n", "3", key, "--", "true"); r.code != exitDataErr {
		t.Fatalf("a run of a third -n: %+v, want exit 65", r)
	}
	plain := key + ".plain"
	if r := dlockRun(t, "run", plain, "--", dlockBin, "semaphore", "resize", plain, "2"); r.code != exitDataErr {
		t.Fatalf("resize of a held plain lock: %+v, want exit 65", r)
	}
}
