package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
)

// viewGuard is what dlock serve checks before its view answers a request:
// the Host header names the address served (so that a page of another site
// cannot reach the view through a DNS name of its own that resolves to this
// machine: DNS rebinding), and, when secret is set, the path starts with it.
type viewGuard struct {
	bind     string          // the host of --http, lower case: a name, an address, or "" / unspecified for every address
	names    map[string]bool // the --host-name values, lower case
	secret   string          // the first path segment every request must carry; "" for none
	next     http.Handler    // the view
	stripped http.Handler    // the view under the secret's prefix
}

func newViewGuard(bind string, names []string, secret string, next http.Handler) *viewGuard {
	g := &viewGuard{bind: hostName(bind), names: map[string]bool{}, secret: secret, next: next}
	for _, n := range names {
		g.names[hostName(n)] = true
	}
	if secret != "" {
		g.stripped = http.StripPrefix("/"+secret, next)
	}
	return g
}

// newSecret returns a random path segment of 128 bits.
func newSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hostName returns host (of a Host header or listen address, with or without
// a port) in lower case, without brackets or a trailing dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
}

// allowed reports whether a request whose Host header names host may reach
// the view.
func (g *viewGuard) allowed(host string) bool {
	h := hostName(host)
	switch {
	case g.names[h]:
		return true
	case isLoopback(g.bind):
		return isLoopback(h)
	case g.bind != "" && !net.ParseIP(g.bind).IsUnspecified():
		if ip := net.ParseIP(g.bind); ip != nil {
			return ip.Equal(net.ParseIP(h))
		}
		return h == g.bind
	}
	// Every address: a loopback name, or an address of this machine.
	if isLoopback(h) {
		return true
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return false
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func (g *viewGuard) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if !g.allowed(r.Host) {
		http.Error(rw, "dlock serve answers requests for the address it serves (or a --host-name) only, not "+printable(r.Host),
			http.StatusMisdirectedRequest)
		return
	}
	if g.secret == "" {
		g.next.ServeHTTP(rw, r)
		return
	}
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if subtle.ConstantTimeCompare([]byte(seg), []byte(g.secret)) != 1 {
		http.Error(rw, "forbidden: this view answers only under the secret path dlock serve printed when it started", http.StatusForbidden)
		return
	}
	g.stripped.ServeHTTP(rw, r)
}
