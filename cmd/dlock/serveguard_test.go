package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/headless"
)

// resolvingTo returns an HTTP client that reaches every host name at addr, as
// a browser does once DNS answers a name with this machine's address.
func resolvingTo(addr string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return new(net.Dialer).DialContext(ctx, network, addr)
		},
	}}
}

func send(t *testing.T, c *http.Client, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeOffLoopback: dlock serve --http 0.0.0.0:0 --allow-unlock refuses
// requests that name another host (a page of another site whose name now
// resolves to this machine: DNS rebinding) and every request outside the
// secret path it prints; under that path, with the host served or a
// --host-name, its page and force-unlock work.
func TestServeOffLoopback(t *testing.T) {
	key := dlocktest.Key(t)
	holder, _, _ := startHolder(t, []string{"--ttl", "2s", "--description", "stuck job"}, key, `echo ok > "$1"; exec sleep 30`)
	url, stderr := startServe(t, "--http", "0.0.0.0:0", "--allow-unlock", "--host-name", "locks.example", key)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.Trim(u.Path, "/")
	if u.Hostname() != "locks.example" || len(secret) < 20 || !strings.Contains(readFile(stderr), "WARNING") {
		t.Fatalf("announced %q, want http://locks.example:PORT/SECRET/; stderr:\n%s", url, readFile(stderr))
	}
	c := resolvingTo(net.JoinHostPort("127.0.0.1", u.Port()))
	j := getServe(t, "http://127.0.0.1:"+u.Port()+"/"+secret+"/")
	if len(j.Locks) != 1 || !j.AllowUnlock {
		t.Fatalf("reply %+v", j)
	}
	owner := j.Locks[0].Owner
	unlock, _ := json.Marshal(map[string]string{"key": key, "owner": owner})
	for _, r := range []struct {
		what, method, url, body string
		want                    int
	}{
		{"a page of another site rebound to this machine", "GET", "http://rebound.example:" + u.Port() + "/" + secret + "/", "", http.StatusMisdirectedRequest},
		{"its read of the locks", "GET", "http://rebound.example:" + u.Port() + "/" + secret + "/api/locks", "", http.StatusMisdirectedRequest},
		{"its unlock", "POST", "http://rebound.example:" + u.Port() + "/" + secret + "/api/unlock", string(unlock), http.StatusMisdirectedRequest},
		{"unlock without the secret", "POST", "http://127.0.0.1:" + u.Port() + "/api/unlock", string(unlock), http.StatusForbidden},
		{"unlock with a wrong secret", "POST", "http://locks.example:" + u.Port() + "/" + strings.ToUpper(secret) + "x/api/unlock", string(unlock), http.StatusForbidden},
		{"the page without the secret", "GET", "http://127.0.0.1:" + u.Port() + "/", "", http.StatusForbidden},
		{"the page by a loopback address", "GET", "http://127.0.0.1:" + u.Port() + "/" + secret + "/", "", http.StatusOK},
		{"the page by its path without the last /", "GET", "http://locks.example:" + u.Port() + "/" + secret, "", http.StatusOK},
	} {
		if code, body := send(t, c, r.method, r.url, r.body); code != r.want {
			t.Errorf("%s: %d %s, want %d", r.what, code, body, r.want)
		}
	}
	if r := dlockRun(t, "status", key); r.code != 0 {
		t.Fatalf("a refused request removed the lock: %s", r.stdout)
	}
	if code, body := send(t, c, "POST", url+"api/unlock", string(unlock)); code != http.StatusOK || !strings.Contains(body, "stuck job") {
		t.Fatalf("unlock under the secret path: %d %s", code, body)
	}
	waitFor(t, "the audit line", fileHas(stderr, `force-unlocked "`+key+`" held by`))
	if res := wait(t, holder, time.Now(), new(bytes.Buffer), new(bytes.Buffer)); res.code != exitLockLost {
		t.Errorf("holder after the unlock: exit %d, want %d", res.code, exitLockLost)
	}
}

// TestServeOffLoopbackPage: the page served under the secret path force-unlocks
// a lock in Chromium.
func TestServeOffLoopbackPage(t *testing.T) {
	headless.Chromium(t)
	key := dlocktest.Key(t)
	holdWith(t, key, "--description", "stuck job")
	url, stderr := startServe(t, "--http", "0.0.0.0:0", "--allow-unlock", key)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || strings.Count(url, "/") != 4 {
		t.Fatalf("announced %q, want http://127.0.0.1:PORT/SECRET/", url)
	}
	b := headless.Start(t)
	b.Navigate(url)
	button := `document.querySelector('tr[data-key="` + key + `"] button.unlock')`
	b.WaitEval("the unlock button", button+` !== null`)
	b.Eval(`setTimeout(() => ` + button + `.click(), 0), true`)
	b.WaitEvent("Page.javascriptDialogOpening")
	b.Call("Page.handleJavaScriptDialog", map[string]any{"accept": true})
	b.WaitEval("the page to report the removal", `document.getElementById("notice").textContent.startsWith("removed `+key+`")`)
	waitFor(t, "the audit line", fileHas(stderr, `force-unlocked "`+key+`" held by`))
	if r := dlockRun(t, "status", key); r.code == 0 {
		t.Fatalf("the lock is still held: %s", r.stdout)
	}
}

// TestViewGuardHosts: the Host headers each listen address lets through.
func TestViewGuardHosts(t *testing.T) {
	for _, c := range []struct {
		bind  string
		names []string
		ok    []string
		no    []string
	}{
		{"127.0.0.1", nil, []string{"127.0.0.1:8080", "localhost:8080", "LOCALHOST.", "[::1]:8080", "127.0.0.1"}, []string{"rebound.example:8080", "10.0.0.1:8080", "", "127.0.0.1.example"}},
		{"localhost", []string{"Locks.Example"}, []string{"localhost", "locks.example:80", "LOCKS.EXAMPLE."}, []string{"other.example"}},
		{"192.0.2.7", nil, []string{"192.0.2.7:9000", "192.0.2.7"}, []string{"127.0.0.1:9000", "localhost", "rebound.example"}},
		{"locks.internal", nil, []string{"locks.internal:9000", "Locks.Internal"}, []string{"127.0.0.1", "rebound.example"}},
		{"0.0.0.0", nil, []string{"127.0.0.1:1", "localhost:1", "[::1]:1"}, []string{"rebound.example:1", "192.0.2.99:1", "0.0.0.0.example"}},
		{"", []string{"locks.example"}, []string{"127.0.0.1", "locks.example"}, []string{"rebound.example"}},
		{"::", nil, []string{"[::1]:1"}, []string{"rebound.example"}},
	} {
		g := newViewGuard(c.bind, c.names, "", nil)
		for _, h := range c.ok {
			if !g.allowed(h) {
				t.Errorf("bound to %q with names %q: Host %q refused", c.bind, c.names, h)
			}
		}
		for _, h := range c.no {
			if g.allowed(h) {
				t.Errorf("bound to %q with names %q: Host %q let through", c.bind, c.names, h)
			}
		}
	}
}
