package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dashboard"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/headless"
	"github.com/dlock-go/dlock/internal/testserver"
)

// startServe starts "dlock serve --http 127.0.0.1:0 ARGS" (another --http in
// ARGS overrides it) and returns the URL it announces and the file that
// receives its stderr (the audit lines).
func startServe(t *testing.T, args ...string) (url, stderrFile string) {
	t.Helper()
	cmd := dlockCmd(t, append([]string{"serve", "--http", "127.0.0.1:0", "--interval", "200ms"}, args...)...)
	cmd.Stderr = outFile(t, &stderrFile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		wait(t, cmd, time.Now(), new(bytes.Buffer), new(bytes.Buffer))
	})
	announced := regexp.MustCompile(`(http://[^\s/]+:\d+/(?:[\w-]+/)?) shows`)
	waitFor(t, "dlock serve to announce its address", func() bool {
		b, _ := os.ReadFile(stderrFile)
		return announced.Match(b)
	})
	b, _ := os.ReadFile(stderrFile)
	return string(announced.FindSubmatch(b)[1]), stderrFile
}

// outFile creates a file for a process's output in the test's directory, and
// sets *path to its name.
func outFile(t *testing.T, path *string) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	*path = f.Name()
	return f
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// serveLocks is the JSON of GET /api/locks as the tests read it.
type serveLocks struct {
	Title       string `json:"title"`
	AllowUnlock bool   `json:"allow_unlock"`
	Held        int    `json:"held"`
	Waiters     int    `json:"waiters"`
	Locks       []struct {
		dashboard.Row
		TTLMS int64 `json:"ttl_ms"`
	} `json:"locks"`
}

func getServe(t *testing.T, url string) serveLocks {
	t.Helper()
	resp, err := http.Get(url + "api/locks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var j serveLocks
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET api/locks: %s %v", resp.Status, err)
	}
	return j
}

func postUnlock(t *testing.T, url, key, owner string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"key": key, "owner": owner})
	return send(t, http.DefaultClient, http.MethodPost, url+"api/unlock", string(body))
}

// TestServe: dlock serve shows the locks other dlock processes hold (a mutex
// with a hostile description, a fair lock with a waiter queued, a semaphore)
// as JSON and in the page Chromium renders; it refuses to unlock without
// --allow-unlock, and requests for another host name.
func TestServe(t *testing.T) {
	prefix := dlocktest.Key(t)
	hostile := "deploy\x1b[2J\n</td></tr><tr data-key=\"forged\">\u202e"
	holdWith(t, prefix+":report", "--description", "nightly report")
	holdWith(t, prefix+":evil", "--description", hostile)
	holdWith(t, prefix+":deploy", "--fair", "--description", "deploy v42")
	holdWith(t, prefix+":pool", "-n", "3")
	waiter := dlockCmd(t, "run", "--fair", "--wait", "60s", prefix+":deploy", "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	url, stderr := startServe(t, prefix+":*")
	if !strings.Contains(readFile(stderr), "read-only") {
		t.Errorf("announce line: %q", readFile(stderr))
	}
	var j serveLocks
	waitFor(t, "the waiter to show", func() bool { j = getServe(t, url); return j.Waiters == 1 })
	if j.Held != 4 || len(j.Locks) != 4 || j.AllowUnlock || !strings.HasPrefix(j.Title, "Redis at 127.0.0.1:") {
		t.Fatalf("reply %+v", j)
	}
	byKey := map[string]int{}
	for i, l := range j.Locks {
		byKey[strings.TrimPrefix(l.Key, prefix+":")] = i
	}
	if l := j.Locks[byKey["deploy"]]; l.Waiters != 1 || l.Description != "deploy v42" || l.PID == 0 || l.TTLMS <= 0 {
		t.Errorf("deploy row %+v", l)
	}
	if l := j.Locks[byKey["pool"]]; l.Kind != "semaphore 3" || l.Holders != 1 || l.Limit != 3 {
		t.Errorf("pool row %+v", l)
	}
	if l := j.Locks[byKey["evil"]]; l.Description != `deploy\x1b[2J\n</td></tr><tr data-key="forged">\u202e` {
		t.Errorf("hostile description %q not escaped", l.Description)
	}

	report := j.Locks[byKey["report"]]
	if code, body := postUnlock(t, url, report.Key, report.Owner); code != http.StatusForbidden {
		t.Errorf("unlock without --allow-unlock: %d %s, want 403", code, body)
	}
	if r := dlockRun(t, "status", report.Key); r.code != 0 {
		t.Errorf("the refused unlock removed the lock: %s", r.stdout)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"api/locks", nil)
	req.Host = "rebound.example:80"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("request for another host name: %v %v, want 421", resp.Status, err)
	} else {
		resp.Body.Close()
	}

	headless.Chromium(t)
	dom := headless.DumpDOM(t, url+"#plot="+prefix+":deploy", 3*time.Second)
	var keys []string
	for _, m := range regexp.MustCompile(`<tr data-key="([^"]*)"`).FindAllStringSubmatch(dom, -1) {
		keys = append(keys, strings.TrimPrefix(m[1], prefix+":"))
	}
	if strings.Join(keys, " ") != "deploy evil pool report" {
		t.Fatalf("page rows %q, want the four locks and nothing forged:\n%s", keys, dom)
	}
	if !strings.Contains(dom, `<td class="waiters num">1</td>`) || strings.Count(dom, `<svg class="plot"`) != 6 || strings.Contains(dom, "force-unlock</button>") {
		t.Errorf("page: want a waiter, 6 plots and no unlock button:\n%s", dom)
	}
}

// TestServeAllowUnlock: with --allow-unlock a confirmed unlock removes the lock,
// the holder's dlock run learns it (exit 76), and stderr has the audit line.
func TestServeAllowUnlock(t *testing.T) {
	key := dlocktest.Key(t)
	holder, _, _ := startHolder(t, []string{"--ttl", "2s", "--description", "stuck job"}, key, `echo ok > "$1"; exec sleep 30`)
	url, stderr := startServe(t, "--allow-unlock", key)
	j := getServe(t, url)
	if len(j.Locks) != 1 || !j.AllowUnlock {
		t.Fatalf("reply %+v", j)
	}
	l := j.Locks[0]
	if code, body := postUnlock(t, url, key, "not-the-holder"); code != http.StatusConflict {
		t.Errorf("unlock of another owner: %d %s, want 409", code, body)
	}
	if code, body := postUnlock(t, url, key, l.Owner); code != http.StatusOK || !strings.Contains(body, "stuck job") {
		t.Fatalf("confirmed unlock: %d %s", code, body)
	}
	waitFor(t, "the audit line", func() bool {
		return strings.Contains(readFile(stderr), `force-unlocked "`+key+`" held by`) && strings.Contains(readFile(stderr), `"stuck job" (owner `+l.Owner)
	})
	res := wait(t, holder, time.Now(), new(bytes.Buffer), new(bytes.Buffer))
	if res.code != exitLockLost {
		t.Errorf("holder after the unlock: exit %d, want %d", res.code, exitLockLost)
	}
}

// TestServeConsensus: the views (serve, list --watch) of etcd and ZooKeeper
// locks.
func TestServeConsensus(t *testing.T) {
	etcd := testserver.StartEtcd(t)
	zk := testserver.StartZooKeeper(t)
	for _, b := range []struct{ name, flag, addr string }{
		{"etcd", "--etcd", etcd.ClientURL},
		{"zk", "--zk", zk.Addr},
	} {
		t.Run(b.name, func(t *testing.T) {
			key := dlocktest.Key(t)
			holdWith(t, key, b.flag, b.addr, "--description", "on "+b.name)
			waiter := dlockCmd(t, "run", b.flag, b.addr, "--wait", "60s", key, "--", "true")
			if err := waiter.Start(); err != nil {
				t.Fatal(err)
			}
			cmd := dlockCmd(t, "list", "--watch", "--interval", "200ms", b.flag, b.addr, key)
			var out string
			cmd.Stdout = outFile(t, &out)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "list --watch to show the lock", func() bool {
				return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` +\S+ +1 +\S+ +\d+ .* on ` + b.name + `$`).MatchString(readFile(out))
			})
			_ = cmd.Process.Signal(syscall.SIGINT)
			if r := wait(t, cmd, time.Now(), new(bytes.Buffer), new(bytes.Buffer)); r.code != 0 {
				t.Errorf("list --watch: exit %d", r.code)
			}
			url, _ := startServe(t, b.flag, b.addr, key)
			var j serveLocks
			waitFor(t, "the lock to show", func() bool { j = getServe(t, url); return len(j.Locks) == 1 })
			if l := j.Locks[0]; !l.Held || l.Description != "on "+b.name || l.PID == 0 || l.Owner == "" {
				t.Errorf("row %+v", l)
			}
			if !strings.Contains(j.Title, map[string]string{"etcd": "etcd at", "zk": "ZooKeeper at"}[b.name]) {
				t.Errorf("title %q", j.Title)
			}
		})
	}
}
