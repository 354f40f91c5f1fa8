package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dlock-go/dlock/dashboard"
)

// serveFlags are the flags of dlock serve.
type serveFlags struct {
	servers     servers
	addr        string
	allowUnlock bool
	hostNames   stringsFlag
	interval    durationFlag
	history     durationFlag
}

func (o *serveFlags) define() *flag.FlagSet {
	fs := newFlagSet("serve")
	o.servers.define(fs)
	fs.StringVar(&o.addr, "http", "127.0.0.1:8080", "listen on `host:port` (port 0: a free one)")
	fs.BoolVar(&o.allowUnlock, "allow-unlock", false, "let the page force-unlock a lock, after a confirmation naming its holder")
	fs.Var(&o.hostNames, "host-name", "also answer requests that name this server `NAME` (their Host header), e.g. its DNS name; repeatable")
	o.interval = durationFlag{d: dashboard.DefaultInterval, min: dashboard.MinInterval, max: time.Hour, def: "1s"}
	fs.Var(&o.interval, "interval", "`duration` between two reads of the locks")
	o.history = durationFlag{d: dashboard.DefaultHistory, min: time.Second, max: 24 * time.Hour, def: "5m"}
	fs.Var(&o.history, "history", "how far back the plots reach (a `duration`)")
	return fs
}

func serveCommand() command {
	return command{
		name: "serve", summary: "serve a live web page of the held locks (no authentication: loopback only)",
		synopsis: "dlock serve [flags] [PATTERN]",
		help: `Serves a web page with the live table of the locks whose names match PATTERN
(default *): holder, time held, TTL left, waiters, holders, acquisitions per
second, with plots of the last minutes for the locks ticked; and the same data
as JSON at /api/locks. The page is one self-contained document: no external
assets, it works offline.

THE PAGE HAS NO AUTHENTICATION. Anyone who can reach the address sees every
lock and its holders' descriptions, and with --allow-unlock can remove locks.
It listens on 127.0.0.1 by default: do not expose it on a network address, and
reach it from elsewhere through an SSH tunnel (ssh -L 8080:127.0.0.1:8080 host).
Read-only unless --allow-unlock is given; each force-unlock is written to
stderr as an audit line. Stops on Ctrl-C.

It answers only requests that name the address it listens on in their Host
header (on loopback: 127.0.0.1, ::1 or localhost; on 0.0.0.0 or ::, an address
of this machine), or a name given with --host-name: a page of another site
cannot reach it through a DNS name of its own that resolves to this machine
(DNS rebinding). Off loopback with --allow-unlock, the page and its API are
served only under a secret path drawn at each start and printed on stderr
(http://HOST:PORT/SECRET/): anyone who has that address can remove locks.

examples:
  dlock serve                               # http://127.0.0.1:8080/
  dlock serve --http 127.0.0.1:9000 'deploy:*'
  dlock serve --allow-unlock --etcd http://127.0.0.1:2379
  curl -s http://127.0.0.1:8080/api/locks | jq '.locks[] | {key, holder, waiters}'`,
		flags: func() *flag.FlagSet { return new(serveFlags).define() },
		run:   runServe,
	}
}

func runServe(ctx context.Context, e *env, args []string) int {
	c := serveCommand()
	o := new(serveFlags)
	pattern, code, ok := parsePattern(e, c, o.define(), args)
	if !ok {
		return code
	}
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return fail(e, c.name, usageErrorf("--http %q: want host:port", o.addr))
	}
	st, err := o.servers.open(ctx, e)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer st.close()
	w, err := dashboard.NewWatcher(st.inspector(), dashboard.Options{
		Pattern: pattern, Interval: o.interval.d, History: o.history.d, Title: st.String(), AllowUnlock: o.allowUnlock,
		DelayedKind: plainKind(st),
		Audit: func(r dashboard.Row, remote string) {
			fmt.Fprintf(e.stderr, "dlock serve: %s force-unlocked %q held by %s (owner %s, token %d) at the request of %s\n",
				time.Now().UTC().Format(time.RFC3339), r.Key, r.Holder, r.Owner, r.Token, remote)
		},
	})
	if err != nil {
		return fail(e, c.name, err)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fail(e, c.name, unavailableErrorf("cannot listen on %s: %v", o.addr, err))
	}
	loopback := isLoopback(host)
	secret := ""
	if o.allowUnlock && !loopback {
		secret = newSecret()
	}
	h := newViewGuard(host, o.hostNames, secret, w.Handler())
	mode := "read-only"
	if o.allowUnlock {
		mode = "force-unlock enabled"
	}
	// The address to print: one the guard lets through.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	at := ln.Addr().String()
	if len(o.hostNames) > 0 {
		at = net.JoinHostPort(o.hostNames[0], port)
	} else if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		at = net.JoinHostPort("127.0.0.1", port)
		fmt.Fprintf(e.stderr, "dlock serve: listening on %s: from another machine, name this one by an address of its own (or a --host-name) in place of 127.0.0.1\n", ln.Addr())
	}
	if secret != "" {
		at += "/" + secret
	}
	fmt.Fprintf(e.stderr, "dlock serve: http://%s/ shows %s, pattern %s (%s)\n", at, st, printable(pattern), mode)
	switch {
	case secret != "":
		fmt.Fprintf(e.stderr, "dlock serve: WARNING: %s is not a loopback address and the page has no authentication but the secret path of the address above: anyone who has it sees every lock and can remove it\n", o.addr)
	case !loopback:
		fmt.Fprintf(e.stderr, "dlock serve: WARNING: %s is not a loopback address and the page has no authentication: anyone who reaches it sees every lock\n", o.addr)
	}
	// Read every interval whether a page is open or not, so that the plots
	// cover the minutes before it was opened.
	rctx, stopReading := context.WithCancel(ctx)
	reading := make(chan struct{})
	go func() { defer close(reading); _ = w.Run(rctx, nil) }()
	defer func() { stopReading(); <-reading }()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
		err = <-done
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(e, c.name, err)
	}
	return exitOK
}

// parsePattern parses the flags of top or serve into fs and returns the
// optional PATTERN argument ("*" when none). ok is false, with the exit code,
// when the command should stop (see parseFlags).
func parsePattern(e *env, c command, fs *flag.FlagSet, args []string) (pattern string, code int, ok bool) {
	a, code, ok := parseFlags(e, c, fs, args)
	if !ok {
		return "", code, false
	}
	switch rest := append(a.before, a.after...); len(rest) {
	case 0:
		return "*", 0, true
	case 1:
		return rest[0], 0, true
	default:
		return "", fail(e, c.name, usageErrorf("one PATTERN expected, got %d arguments: %s", len(rest), strings.Join(rest, " "))), false
	}
}

// isLoopback reports whether host (of a listen address) is a loopback name or
// address. An empty host listens on every address: not loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
