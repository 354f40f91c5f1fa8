package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dashboard"
	"github.com/dlock-go/dlock/memlock"
)

// locksJSON is the JSON of GET api/locks, as a client reads it.
type locksJSON struct {
	Time        string `json:"time"`
	Pattern     string `json:"pattern"`
	IntervalMS  int64  `json:"interval_ms"`
	AllowUnlock bool   `json:"allow_unlock"`
	Held        int    `json:"held"`
	Waiters     int    `json:"waiters"`
	Error       string `json:"error"`
	Locks       []struct {
		dashboard.Row
		TTLMS    int64 `json:"ttl_ms"`
		TTLMaxMS int64 `json:"ttl_max_ms"`
		HeldMS   int64 `json:"held_ms"`
	} `json:"locks"`
	Totals []dashboard.Point            `json:"totals"`
	Plots  map[string][]dashboard.Point `json:"plots"`
}

func getLocks(t testing.TB, url string) locksJSON {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	var j locksJSON
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		t.Fatal(err)
	}
	return j
}

func post(t testing.TB, url, contentType, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func unlockBody(key, owner string) string {
	b, _ := json.Marshal(map[string]string{"key": key, "owner": owner})
	return string(b)
}

func TestHandlerJSON(t *testing.T) {
	ctx := context.Background()
	st := memlock.NewStore()
	c := newClient(t, st)
	l, err := c.TryLock(ctx, "deploy:web", dlock.WithMetadata(runMeta(t, "ci-3", 77, "<b>deploy</b>\x1b[2J")))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	srv := httptest.NewServer(http.StripPrefix("/debug/locks", dashboard.Handler(st, dashboard.Options{Title: "memlock"})))
	defer srv.Close()

	j := getLocks(t, srv.URL+"/debug/locks/api/locks?plot=deploy:web&plot=absent")
	if j.Pattern != "*" || j.IntervalMS != 1000 || j.AllowUnlock || j.Held != 1 || len(j.Locks) != 1 || j.Error != "" {
		t.Fatalf("reply %+v", j)
	}
	r := j.Locks[0]
	if r.Key != "deploy:web" || r.Kind != "mutex" || r.Host != "ci-3" || r.PID != 77 || r.Owner != l.Owner() || r.TTLMS <= 0 || r.TTLMaxMS < r.TTLMS {
		t.Errorf("row %+v", r)
	}
	if want := `ops@ci-3 pid 77 "<b>deploy</b>\x1b[2J"`; r.Holder != want {
		t.Errorf("holder %q, want %q (escaped for terminals; the page writes it as text)", r.Holder, want)
	}
	if len(j.Totals) == 0 || len(j.Plots["deploy:web"]) == 0 || j.Plots["absent"] != nil {
		t.Errorf("totals %d points, plots %v", len(j.Totals), j.Plots)
	}

	// The page, under the prefix, names its API relative to itself.
	resp, err := http.Get(srv.URL + "/debug/locks/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `base + "api/locks"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("page: %s, CSP %q", resp.Status, resp.Header.Get("Content-Security-Policy"))
	}
	for _, ref := range []string{"src=", "href=", "url(", "@import", "https://"} {
		if strings.Contains(string(page), ref) {
			t.Errorf("the page refers to an external resource (%s)", ref)
		}
	}

	// Read-only: the unlock call is refused and the lock stays.
	code, body := post(t, srv.URL+"/debug/locks/api/unlock", "application/json", unlockBody("deploy:web", l.Owner()))
	if code != http.StatusForbidden || !strings.Contains(body, "not enabled") {
		t.Errorf("unlock on a read-only view: %d %s, want 403", code, body)
	}
	if info, _ := st.Inspect(ctx, "deploy:web"); !info.Held || info.Owner != l.Owner() {
		t.Fatalf("the lock was removed by a refused call: %+v", info)
	}
}

func TestHandlerUnlock(t *testing.T) {
	ctx := context.Background()
	st := memlock.NewStore()
	a, b := newClient(t, st), newClient(t, st)
	l, err := a.TryLock(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		audited []string
	)
	h := dashboard.Handler(st, dashboard.Options{AllowUnlock: true, Audit: func(r dashboard.Row, remote string) {
		mu.Lock()
		defer mu.Unlock()
		audited = append(audited, r.Key+" "+r.Owner+" "+remote)
	}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	url := srv.URL + "/api/unlock"
	held := func() bool {
		info, _ := st.Inspect(ctx, "stuck")
		return info.Held
	}
	for _, c := range []struct {
		name, ctype, body string
		hdr               []string
		code              int
	}{
		{"a form post (cross-site without preflight)", "application/x-www-form-urlencoded", "key=stuck&owner=" + l.Owner(), nil, http.StatusUnsupportedMediaType},
		{"another origin", "application/json", unlockBody("stuck", l.Owner()), []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"another site", "application/json", unlockBody("stuck", l.Owner()), []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"no owner confirmed", "application/json", `{"key":"stuck"}`, nil, http.StatusBadRequest},
		{"another owner confirmed", "application/json", unlockBody("stuck", "someone-else"), nil, http.StatusConflict},
		{"a bad key", "application/json", unlockBody("", "x"), nil, http.StatusBadRequest},
		{"a free lock", "application/json", unlockBody("free", "x"), nil, http.StatusConflict},
	} {
		if code, body := post(t, url, c.ctype, c.body, c.hdr...); code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.code)
		}
		if !held() {
			t.Fatalf("%s removed the lock", c.name)
		}
	}
	if resp, err := http.Get(url); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET api/unlock: %v %v", resp.Status, err)
	} else {
		resp.Body.Close()
	}

	code, body := post(t, url, "application/json", unlockBody("stuck", l.Owner()), "Origin", srv.URL)
	if code != http.StatusOK || !strings.Contains(body, `"removed"`) || !strings.Contains(body, l.Owner()) {
		t.Fatalf("confirmed unlock: %d %s", code, body)
	}
	if held() {
		t.Fatalf("confirmed unlock left the lock")
	}
	mu.Lock()
	if len(audited) != 1 || !strings.HasPrefix(audited[0], "stuck "+l.Owner()+" 127.0.0.1:") {
		t.Errorf("audit %q", audited)
	}
	mu.Unlock()

	// The next holder is not removed by a confirmation of the previous one.
	l2, err := b.TryLock(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock(ctx)
	if code, body := post(t, url, "application/json", unlockBody("stuck", l.Owner())); code != http.StatusConflict || !strings.Contains(body, "changed hands") && !strings.Contains(body, "not by the holder confirmed") {
		t.Errorf("stale confirmation: %d %s, want 409", code, body)
	}
	if !held() {
		t.Fatalf("a stale confirmation removed the new holder")
	}
}

func TestHandlerBadPattern(t *testing.T) {
	srv := httptest.NewServer(dashboard.Handler(memlock.NewStore(), dashboard.Options{Pattern: "{"}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/locks")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(b), "pattern") {
		t.Errorf("bad pattern: %s %s", resp.Status, b)
	}
}
