package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
)

// TestOneOutputShapeOnEveryBackend holds an exclusive lock with dlock run on
// Redis, Redlock, etcd and ZooKeeper: status --json and list --json have the
// same fields on each (holders, limit and last_token among them), and list
// shows one holder, not "0 shared".
func TestOneOutputShapeOnEveryBackend(t *testing.T) {
	b, c := testserver.StartRedis(t), testserver.StartRedis(t)
	etcd := testserver.StartEtcd(t)
	zk := testserver.StartZooKeeper(t)
	var want []string
	for _, be := range []struct {
		name  string
		flags []string
	}{
		{"redis", []string{"--redis", redisURL()}},
		{"redlock", []string{"--redis", redisURL(), "--redis", "redis://" + b.Addr + "/0", "--redis", "redis://" + c.Addr + "/0"}},
		{"etcd", []string{"--etcd", etcd.ClientURL}},
		{"zk", []string{"--zk", zk.Addr}},
	} {
		t.Run(be.name, func(t *testing.T) {
			key := dlocktest.Key(t)
			holder, _, _ := startHolder(t, append(be.flags, "--description", "shape"), key, `echo ok > "$1"; exec sleep 30`)
			defer func() { _ = holder.Process.Kill() }()
			args := func(cmd string, more ...string) []string {
				return append(append([]string{cmd}, be.flags...), more...)
			}
			r := dlockRun(t, args("status", "--json", key)...)
			var status map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &status); err != nil {
				t.Fatalf("status --json: %v %q %q", err, r.stdout, r.stderr)
			}
			r = dlockRun(t, args("list", "--json", key)...)
			var list []map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 {
				t.Fatalf("list --json: %v %q %q", err, r.stdout, r.stderr)
			}
			got := fields(status)
			if lf := fields(list[0]); !slices.Equal(lf, got) {
				t.Errorf("list --json fields %v, status --json fields %v", lf, got)
			}
			for _, f := range []string{"holders", "limit", "last_token"} {
				if !slices.Contains(got, f) {
					t.Errorf("status --json lacks %q: %s", f, r.stdout)
				}
			}
			last, _ := status["last_token"].(float64)
			token, _ := status["token"].(float64)
			if status["holders"] != 1.0 || status["limit"] != 1.0 || token == 0 || last < token {
				t.Errorf("an exclusive lock: holders %v, limit %v, last_token %v (token %v)", status["holders"], status["limit"], status["last_token"], status["token"])
			}
			if want == nil {
				want = got
			} else if !slices.Equal(got, want) {
				t.Errorf("fields %v, on Redis %v", got, want)
			}
			r = dlockRun(t, args("list", key)...)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 2 || strings.Contains(r.stdout, "shared") || cells(lines[0], lines[1])["HOLDERS"] != "1" || cells(lines[0], lines[1])["KIND"] == "lock" {
				t.Errorf("list of an exclusive lock:\n%s", r.stdout)
			}
		})
	}
}

// fields returns the sorted names of a JSON object's fields.
func fields(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
