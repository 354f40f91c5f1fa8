package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dashboard"
	"github.com/dlock-go/dlock/internal/headless"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// redisLocks holds, on a real redis-server, one lock of every kind, each
// through a Client of its own (as separate processes would): a mutex with run
// metadata, a fair lock with two waiters queued, a semaphore of 3 with 2
// permits taken, a read lock with 2 readers, and a mutex whose description is
// hostile. It returns the Inspector of the server.
func redisLocks(t *testing.T) driver.Inspector {
	t.Helper()
	ctx := context.Background()
	srv := testserver.StartRedis(t)
	newRDB := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	must := func(l *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Unlock(context.Background()) })
		return l
	}
	m, _ := redislock.New(newRDB())
	must(m.TryLock(ctx, "jobs:report", dlock.WithMetadata(runMeta(t, "web-1", 4242, "nightly report"))))
	evil, _ := redislock.New(newRDB())
	must(evil.TryLock(ctx, "jobs:evil", dlock.WithMetadata(runMeta(t, "h\x1b[2J", 1, "</td></tr><tr data-key=\"forged\"><td>\n\x1b[31mFORGED\u202e"))))
	fair, _ := redislock.NewFair(newRDB())
	must(fair.TryLock(ctx, "deploy:prod", dlock.WithMetadata(runMeta(t, "ci-2", 99, "deploy"))))
	waitCtx, stopWaiting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stopWaiting(); wg.Wait() })
	in, err := redislock.NewInspector(newRDB())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		w, _ := redislock.NewFair(newRDB())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := w.Lock(waitCtx, "deploy:prod"); err == nil {
				l.Unlock(context.Background())
			} else if !errors.Is(err, context.Canceled) {
				t.Errorf("waiter: %v", err)
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := in.Inspect(ctx, "deploy:prod")
		if err == nil && info.Waiters == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two waiters were not queued: %+v %v", info, err)
		}
		time.Sleep(20 * time.Millisecond) // the waiters queue in their own goroutines
	}
	for i := 0; i < 2; i++ {
		s, _ := redislock.NewSemaphore(newRDB(), 3)
		must(s.TryLock(ctx, "pool:db"))
		rw, _ := redislock.NewRWMutex(newRDB())
		must(rw.RLocker().TryLock(ctx, "config"))
	}
	return in
}

func TestPageInChromium(t *testing.T) {
	headless.Chromium(t)
	in := redisLocks(t)
	srv := httptest.NewServer(dashboard.Handler(in, dashboard.Options{Title: "Redis", AllowUnlock: true}))
	defer srv.Close()
	// Two reads a second apart give the history two points.
	getLocks(t, srv.URL+"/api/locks")

	dom := headless.DumpDOM(t, srv.URL+"/#plot=deploy:prod", 3*time.Second)
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the page did not load its data:\n%s", dom)
	}
	rows := regexp.MustCompile(`<tr data-key="([^"]*)"`).FindAllStringSubmatch(dom, -1)
	var keys []string
	for _, r := range rows {
		keys = append(keys, r[1])
	}
	if got := strings.Join(keys, " "); got != "config deploy:prod jobs:evil jobs:report pool:db" {
		t.Fatalf("rows %q: want the five locks, nothing forged\n%s", got, dom)
	}
	row := func(key string) string {
		i := strings.Index(dom, `<tr data-key="`+key+`"`)
		j := strings.Index(dom[i:], "</tr>")
		return dom[i : i+j]
	}
	for key, want := range map[string][]string{
		"deploy:prod": {`<td class="kind">` + kind(t, in, "deploy:prod", driver.KindFair) + `</td>`, `<td class="waiters num">2</td>`, `ops@ci-2 pid 99 "deploy"`, `class="bar"`, `force-unlock`},
		"pool:db":     {`<td class="kind">semaphore 3</td>`, `<td class="holders num">2/3</td>`},
		"config":      {`<td class="kind">read-write</td>`, `<td class="holders num">2 shared</td>`},
		"jobs:report": {`<td class="kind">` + kind(t, in, "jobs:report", driver.KindMutex) + `</td>`, `ops@web-1 pid 4242 "nightly report"`, `<td class="waiters num">0</td>`},
		"jobs:evil":   {`ops@h\x1b[2J pid 1 "&lt;/td&gt;&lt;/tr&gt;&lt;tr data-key="forged"&gt;&lt;td&gt;\n\x1b[31mFORGED\u202e"</td>`},
	} {
		r := row(key)
		for _, w := range want {
			if !strings.Contains(r, w) {
				t.Errorf("row %s lacks %s:\n%s", key, w, r)
			}
		}
	}
	if n := strings.Count(dom, `<svg class="plot"`); n != 6 {
		t.Errorf("%d plots, want 3 totals and 3 for the lock ticked", n)
	}
	if !strings.Contains(dom, `<div class="card" data-key="deploy:prod">`) {
		t.Errorf("no plot card for the lock ticked")
	}
	if !strings.Contains(dom, "5 held · 2 waiting") {
		t.Errorf("status line lacks the totals")
	}

	shot := filepath.Join(artifacts(t), "serve.png")
	headless.Screenshot(t, srv.URL+"/#plot=deploy:prod,pool:db&sort=waiters", shot, 1280, 720, 3*time.Second)
	t.Logf("screenshot: %s", shot)
}

// kind is the kind the views show for key: want where the backend names it,
// "exclusive" where it does not.
func kind(t *testing.T, in driver.Inspector, key, want string) string {
	t.Helper()
	info, err := in.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind == "" {
		return "exclusive"
	}
	return want
}

// artifacts is the directory where tests keep what a person may want to look
// at: $DLOCK_TEST_ARTIFACTS when set, else a temporary directory.
func artifacts(t *testing.T) string {
	if d := os.Getenv("DLOCK_TEST_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestPageUnlockConfirmation clicks force-unlock in the page Chromium shows: the
// confirmation names the lock, its holder and owner; dismissed, nothing is
// removed; accepted, the lock is removed and the page says so.
func TestPageUnlockConfirmation(t *testing.T) {
	headless.Chromium(t)
	ctx := context.Background()
	st := memlock.NewStore()
	l, err := newClient(t, st).TryLock(ctx, "stuck", dlock.WithMetadata(runMeta(t, "web-1", 4242, "nightly report")))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	h := dashboard.Handler(st, dashboard.Options{AllowUnlock: true, Interval: 200 * time.Millisecond})
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	b := headless.Start(t)
	b.Navigate(srv.URL + "/")
	button := `document.querySelector('tr[data-key="stuck"] button.unlock')`
	b.WaitEval("the unlock button", button+` !== null`)
	click := func() string {
		// Clicked from a timer: confirm() blocks the page until answered.
		b.Eval(`setTimeout(() => ` + button + `.click(), 0), true`)
		var dlg struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(b.WaitEvent("Page.javascriptDialogOpening"), &dlg); err != nil || dlg.Type != "confirm" {
			t.Fatalf("dialog %+v %v", dlg, err)
		}
		return dlg.Message
	}
	msg := click()
	for _, want := range []string{`Force-unlock "stuck"?`, `Held by: ops@web-1 pid 4242 "nightly report"`, "Owner: " + l.Owner()} {
		if !strings.Contains(msg, want) {
			t.Errorf("confirmation %q lacks %q", msg, want)
		}
	}
	b.Call("Page.handleJavaScriptDialog", map[string]any{"accept": false})
	click()
	b.Call("Page.handleJavaScriptDialog", map[string]any{"accept": true})
	b.WaitEval("the page to report the removal", `document.getElementById("notice").textContent.startsWith("removed stuck held by ops@web-1")`)
	if info, _ := st.Inspect(ctx, "stuck"); info.Held {
		t.Fatalf("an accepted confirmation left the lock: %+v", info)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("%d unlock requests, want 1: the dismissed confirmation sent one", n)
	}
}

// TestPageFitsWindow renders, in a 1200 px wide Chromium window, locks with a
// 50-character key and a long description, force-unlock enabled: every column
// stays on the screen (the key and the holder are cut, whole in their
// tooltips), and the waiters of a store that does not know them show as "?".
func TestPageFitsWindow(t *testing.T) {
	headless.Chromium(t)
	ctx := context.Background()
	st := memlock.NewStore()
	long := "deploy:" + strings.Repeat("region-eu-west-", 2)
	long += strings.Repeat("x", 50-len(long))
	for _, k := range []string{long, "short"} {
		l, err := newClient(t, st).TryLock(ctx, k, dlock.WithMetadata(runMeta(t, "build-host-17.example.internal", 4242, strings.Repeat("a long description ", 6))))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	h := dashboard.Handler(unknownWaiters{st}, dashboard.Options{AllowUnlock: true, Interval: 200 * time.Millisecond})
	srv := httptest.NewServer(h)
	defer srv.Close()

	b := headless.Start(t)
	b.Call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1200, "height": 800, "deviceScaleFactor": 1, "mobile": false})
	b.Navigate(srv.URL + "/")
	b.WaitEval("the rows", `document.querySelectorAll("#rows tr").length === 2`)
	var fit struct {
		Width, Scroll int
		Right         map[string]int
		Title         string
		Waiters       string
	}
	js := b.Eval(`(() => {
		const tr = document.querySelector('#rows tr[data-key="` + long + `"]');
		const right = {};
		for (const td of tr.children) right[td.className || td.querySelector("button") ? (td.className || "unlock") : "td"] = Math.ceil(td.getBoundingClientRect().right);
		return { width: window.innerWidth, scroll: document.documentElement.scrollWidth, right,
			title: tr.querySelector("td.key").title, waiters: tr.querySelector("td.waiters").textContent };
	})()`)
	if err := json.Unmarshal(js, &fit); err != nil {
		t.Fatal(err)
	}
	if fit.Width != 1200 {
		t.Fatalf("window %d px wide, want 1200", fit.Width)
	}
	if fit.Scroll > fit.Width {
		t.Errorf("the page is %d px wide in a %d px window", fit.Scroll, fit.Width)
	}
	for _, c := range []string{"waiters num", "holders num", "rate num", "unlock"} {
		if r, ok := fit.Right[c]; !ok || r > fit.Width {
			t.Errorf("column %q ends at %d px (present %v), past the window's %d px: %v", c, r, ok, fit.Width, fit.Right)
		}
	}
	if fit.Title != long {
		t.Errorf("the key's tooltip %q, want the whole key", fit.Title)
	}
	if fit.Waiters != "?" {
		t.Errorf("waiters unknown to the store show as %q, want \"?\"", fit.Waiters)
	}
}

// unknownWaiters is an Inspector whose store does not know its waiters.
type unknownWaiters struct{ *memlock.Store }

func (u unknownWaiters) ListPrefix(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	infos, err := u.Store.ListPrefix(ctx, prefix)
	for i := range infos {
		infos[i].Waiters = driver.WaitersUnknown
	}
	return infos, err
}
