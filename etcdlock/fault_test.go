package etcdlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Fault tests against real etcd servers: a holder process paused past its lease,
// a holder cut off from the server, a server restart, a waiter process killed.
// Each logs one SUMMARY line with its figures.

// helperEnv selects a helper mode: the test binary runs itself again with it
// set, and TestMain runs the helper instead of the tests. The helper reads
// ADDR, KEY, TTL (milliseconds) and RESOURCE from its environment, writes one
// line per event on stdout, and obeys commands on stdin.
const helperEnv = "DLOCK_ETCDLOCK_HELPER"

// runHelper is the body of a helper process; it returns the exit code.
func runHelper(mode string) int {
	if err := helper(mode); err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	return 0
}

func helper(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv("ADDR")}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ms, _ := strconv.Atoi(os.Getenv("TTL"))
	c, err := New(cli, dlock.WithTTL(time.Duration(ms)*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		return err
	}
	key := os.Getenv("KEY")
	switch mode {
	case "wait": // queue behind the holder until killed
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		fmt.Println("acquired", l.Token())
		return nil
	case "hold":
		// Hold the lock, report its loss when Done fires, and obey "check"
		// (report Err and Done) and "write" (a fenced write of RESOURCE).
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		fmt.Println("acquired", l.Token())
		go func() {
			<-l.Done()
			fmt.Println("lost", l.Deadline().UnixNano(), errors.Is(l.Err(), dlock.ErrLockLost))
		}()
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "check":
				lost := errors.Is(l.Err(), dlock.ErrLockLost)
				done := false
				select {
				case <-l.Done():
					done = true
				default:
				}
				fmt.Println("check", lost, done, time.Until(l.Deadline()).Milliseconds())
			case "write":
				ok, err := fencedPut(ctx, cli, os.Getenv("RESOURCE"), l.Token(), "written under "+strconv.FormatUint(l.Token(), 10))
				if err != nil {
					return err
				}
				fmt.Println("wrote", ok)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// fencedPut is a resource in etcd that checks fencing tokens: it writes value to
// the key res only if no write with a newer token was made before, and reports
// whether it wrote. The newest token seen is kept in res+"/token", zero-padded
// so that etcd's byte-wise comparison orders tokens as numbers; a holder may
// write more than once with its own token.
func fencedPut(ctx context.Context, cli *clientv3.Client, res string, token uint64, value string) (bool, error) {
	tk := res + "/token"
	write := []clientv3.Op{clientv3.OpPut(tk, fmt.Sprintf("%020d", token)), clientv3.OpPut(res, value)}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(tk), "=", 0)).
		Then(write...).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(tk), "<", fmt.Sprintf("%020d", token+1))}, write, nil)).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded || resp.Responses[0].GetResponseTxn().Succeeded, nil
}

// proc is a helper process.
type proc struct {
	cmd   *exec.Cmd
	in    *os.File // its stdin
	lines chan string
	seen  []string // lines read but not yet asked for
}

// startProc runs the helper mode with env (KEY=VALUE pairs) in a process of its
// own, killed when the test ends.
func startProc(t *testing.T, mode string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	p := &proc{cmd: cmd, in: w, lines: make(chan string, 64)}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_ = cmd.Wait()
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = w.Close()
		<-exited
	})
	return p
}

// next returns the fields after the word ev of the helper's next line starting
// with ev (other lines stay for later calls). It fails the test when the
// helper reports an error, exits, or says nothing of ev within timeout.
func (p *proc) next(t *testing.T, ev string, timeout time.Duration) []string {
	t.Helper()
	for i, line := range p.seen {
		if f := strings.Fields(line); f[0] == ev {
			p.seen = append(p.seen[:i], p.seen[i+1:]...)
			return f[1:]
		}
	}
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			f := strings.Fields(line)
			switch {
			case !ok:
				t.Fatalf("helper exited before %q", ev)
			case len(f) == 0:
			case f[0] == "error":
				t.Fatalf("helper: %s", line)
			case f[0] == ev:
				return f[1:]
			default:
				p.seen = append(p.seen, line)
			}
		case <-tm.C:
			t.Fatalf("helper said no %q within %v", ev, timeout)
		}
	}
}

func (p *proc) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// summary logs the one-line figures of a fault test.
func summary(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("SUMMARY %s: "+format, append([]any{t.Name()}, args...)...)
}

func msSince(a, b time.Time) string { return fmt.Sprintf("%.1fms", float64(b.Sub(a))/1e6) }

// entryKV reads the queue entry of owner for key, failing the test when it is missing.
func entryKV(t *testing.T, cli *clientv3.Client, key, owner string) (*mvccpb.KeyValue, int64) {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 5*time.Second), EntryKey(key, owner))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("entry of %s for %s: %v %v", owner, key, resp, err)
	}
	return resp.Kvs[0], resp.Header.Revision
}

// removal is the deletion of a key: when a watch saw it, and its revision.
type removal struct {
	at  time.Time
	rev int64
}

// deletion watches key from revision rev on, and returns a channel that
// receives its deletion.
func deletion(t *testing.T, cli *clientv3.Client, key string, rev int64) <-chan removal {
	ctx, cancel := context.WithCancel(context.Background())
	wch := cli.Watch(ctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut())
	out := make(chan removal, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					out <- removal{time.Now(), ev.Kv.ModRevision}
					return
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

func awaitDeletion(t *testing.T, ch <-chan removal, within time.Duration) removal {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(within):
		t.Fatalf("entry not deleted within %v", within)
	}
	return removal{}
}

// contend polls TryLock every 10ms until it succeeds or timeout passes. It
// returns the lease, the time just before the successful attempt was sent, and
// the number of attempts refused before it.
func contend(t *testing.T, c *Client, key string, timeout time.Duration) (*dlock.Lease, time.Time, int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	refused := 0
	for time.Now().Before(deadline) {
		start := time.Now()
		l, err := c.TryLock(ctx, key)
		if err == nil {
			t.Cleanup(func() { _ = l.Unlock(ctx) })
			return l, start, refused
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock: %v", err)
		}
		refused++
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	t.Fatalf("%q not acquired within %v (%d attempts refused)", key, timeout, refused)
	return nil, time.Time{}, 0
}

// locked is the outcome of a Lock call made by lockAsync, and when it returned.
type locked struct {
	l   *dlock.Lease
	err error
	at  time.Time
}

// lockAsync calls c.Lock in a goroutine; the channel receives its outcome.
func lockAsync(ctx context.Context, c dlock.Locker, key string) <-chan locked {
	ch := make(chan locked, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		ch <- locked{l, err, time.Now()}
	}()
	return ch
}

// awaitLock waits for the outcome of lockAsync, and fails the test unless it
// is the lock, taken before ctx ends.
func awaitLock(t *testing.T, ctx context.Context, ch <-chan locked) locked {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r
	case <-ctx.Done():
		t.Fatal("the waiter never got the lock")
	}
	return locked{}
}

// attempted is a Driver whose first Acquire closes first when it returns.
type attempted struct {
	*Driver
	once  sync.Once
	first chan struct{}
}

func (a *attempted) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	g, err := a.Driver.Acquire(ctx, r)
	a.once.Do(func() { close(a.first) })
	return g, err
}

// TestFaultHolderPaused: a holder process stopped with SIGSTOP for longer than
// its lease is overtaken only once the server has expired its lease; after
// SIGCONT it sees the loss at its first check, and its fenced write is rejected
// by a resource that checks tokens.
func TestFaultHolderPaused(t *testing.T) {
	obs := newEtcd(t)
	key := testKey(t)
	res := "resource/" + key
	holder := startProc(t, "hold", "ADDR="+srv.Addr, "KEY="+key, "TTL=1000", "RESOURCE="+res)
	token, _ := strconv.ParseUint(holder.next(t, "acquired", 20*time.Second)[0], 10, 64)
	holder.send(t, "write")
	if w := holder.next(t, "wrote", 5*time.Second); w[0] != "true" {
		t.Fatal("the holder's first fenced write was rejected")
	}
	owners := entries(t, obs, key)
	if len(owners) != 1 {
		t.Fatalf("entries %v", owners)
	}
	_, rev := entryKV(t, obs, key, owners[0])
	gone := deletion(t, obs, EntryKey(key, owners[0]), rev+1)

	holder.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	l, start, refused := contend(t, newClient(t, dlock.WithTTL(5*time.Second)), key, 15*time.Second)
	del := awaitDeletion(t, gone, 5*time.Second)
	// The token is the create revision of the new entry: it was written after
	// the server deleted the paused holder's entry, not before.
	if l.Token() <= uint64(del.rev) {
		t.Fatalf("new holder's token %d not above the revision %d that expired the paused holder", l.Token(), del.rev)
	}
	if l.Token() <= token {
		t.Fatalf("new token %d not above the paused holder's %d", l.Token(), token)
	}
	if ok, err := fencedPut(ctxT(t, 5*time.Second), obs, res, l.Token(), "new holder"); err != nil || !ok {
		t.Fatalf("new holder's fenced write: %v %v", ok, err)
	}

	holder.signal(t, syscall.SIGCONT)
	resumed := time.Now()
	holder.send(t, "check")
	chk := holder.next(t, "check", 5*time.Second)
	checked := time.Now()
	if chk[0] != "true" || chk[1] != "true" {
		t.Errorf("resumed holder's first check: lost=%s done=%s (deadline in %sms), want ErrLockLost with Done closed; stopped for %s",
			chk[0], chk[1], chk[2], msSince(stopped, resumed))
	}
	holder.send(t, "write") // a holder that writes without checking, or was paused after its check
	if w := holder.next(t, "wrote", 5*time.Second); w[0] != "false" {
		t.Error("the resumed holder's fenced write was accepted")
	}
	lost := holder.next(t, "lost", 5*time.Second)
	deadline, _ := strconv.ParseInt(lost[0], 10, 64)
	if old := time.Unix(0, deadline); !old.Before(start) {
		t.Errorf("paused holder's deadline %s after the new holder's acquire began", msSince(start, old))
	}
	if lost[1] != "true" {
		t.Fatal("the paused holder's lease ended without ErrLockLost")
	}
	resp, err := obs.Get(ctxT(t, 5*time.Second), res)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "new holder" {
		t.Fatalf("resource after the stale write: %v %v", resp, err)
	}
	summary(t, "ttl=1s stop-to-expiry-seen=%s stop-to-new-acquire=%s refused-while-paused=%d expiry-revision=%d new-token=%d old-token=%d old-deadline-before-new-acquire-by=%s first-check-after-resume: lost=%s done=%s (%s) stale-writes-rejected=1 accepted=0",
		msSince(stopped, del.at), msSince(stopped, start), refused, del.rev, l.Token(), token,
		msSince(time.Unix(0, deadline), start), chk[0], chk[1], msSince(resumed, checked))
}

// TestFaultHolderCutOff: the connection between a holder and etcd is
// black-holed in both directions. The holder's loss signal fires before the
// server expires its lease and before another client acquires, on one
// monotonic clock; once the connection is back, neither the Lease nor the
// driver can extend the lost holding.
func TestFaultHolderCutOff(t *testing.T) {
	const ttl = 2 * time.Second
	proxy := testproxy.Start(t, srv.Addr)
	obs := newEtcd(t)
	key := testKey(t)
	ctx := context.Background()
	// A drift factor of 10% (202ms) leaves room for the delivery of Done on a
	// loaded machine; the margins are logged.
	holder, err := New(newEtcd(t, proxy.Addr), dlock.WithTTL(ttl), dlock.WithAutoRenew(true),
		dlock.WithRenewEvery(300*time.Millisecond), dlock.WithDriftFactor(0.1))
	if err != nil {
		t.Fatal(err)
	}
	a, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	first := a.Deadline()
	for renewed := time.Now().Add(5 * time.Second); !a.Deadline().After(first); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(renewed) {
			t.Fatal("no renewal through the proxy")
		}
	}
	kv, rev := entryKV(t, obs, key, a.Owner())
	gone := deletion(t, obs, EntryKey(key, a.Owner()), rev+1)
	notified := make(chan time.Time, 1)
	go func() { <-a.Done(); notified <- time.Now() }()

	cut := time.Now()
	proxy.Blackhole(testproxy.Upstream, true)
	proxy.Blackhole(testproxy.Downstream, true)
	b, start, refused := contend(t, newClient(t, dlock.WithTTL(5*time.Second)), key, 15*time.Second)
	var done time.Time
	select {
	case done = <-notified:
	case <-time.After(5 * time.Second):
		t.Fatal("holder never notified")
	}
	del := awaitDeletion(t, gone, 5*time.Second)
	if !done.Before(del.at) {
		t.Fatalf("holder notified %s after the server's expiry of its lease was seen", msSince(del.at, done))
	}
	if !done.Before(start) || !a.Deadline().Before(start) {
		t.Fatalf("holder notified %s (deadline %s) after the new holder's acquire began",
			msSince(start, done), msSince(start, a.Deadline()))
	}
	if !errors.Is(a.Err(), dlock.ErrLockLost) {
		t.Fatalf("holder's Err = %v, want ErrLockLost", a.Err())
	}
	if b.Token() <= uint64(del.rev) {
		t.Fatalf("new holder's token %d not above the revision %d that expired the old lease", b.Token(), del.rev)
	}

	// The heal: the black-holed connection has lost data for good, as a
	// connection that timed out; the client connects again.
	proxy.Blackhole(testproxy.Upstream, false)
	proxy.Blackhole(testproxy.Downstream, false)
	proxy.Reset()
	healed := time.Now()
	if err := a.Extend(ctx, ttl); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Lease.Extend after the heal = %v, want ErrLockLost", err)
	}
	// The driver, given the lost holding's own handle, renews its lease (the
	// same TTL) or moves the entry to a new lease (another TTL): both refused.
	for _, secs := range []int64{2, 3} {
		h := newQueueEntry(EntryKey(key, a.Owner()), int64(a.Token()), clientv3.LeaseID(kv.Lease), 2)
		hd := driver.Holding{Key: key, Owner: a.Owner(), TTL: ttl, Handle: h}
		rctx := ctxT(t, 10*time.Second)
		err := retryUnavailable(rctx, func() error {
			_, err := holder.Driver().(*Driver).Extend(rctx, hd, seconds(secs))
			return err
		})
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("driver Extend(%ds) of the lost holding after the heal = %v, want ErrNotHeld", secs, err)
		}
	}
	extended := time.Now()
	if _, err := b.TTL(ctx); err != nil {
		t.Fatalf("new holder lost the lock after the old one's extends: %v", err)
	}
	if got := entries(t, obs, key); len(got) != 1 || got[0] != b.Owner() {
		t.Fatalf("entries %v, want the new holder's alone", got)
	}
	summary(t, "ttl=%v cut-to-notified=%s notified-before-expiry-seen-by=%s notified-before-new-acquire-by=%s (deadline-before-by=%s) refused-while-old-lease-lived=%d heal-to-extends-refused=%s",
		ttl, msSince(cut, done), msSince(done, del.at), msSince(done, start), msSince(a.Deadline(), start), refused, msSince(healed, extended))
}

// TestFaultServerRestart: etcd is killed and started again on its data while a
// lock is held (with renewals) and a Lock call waits. etcd keeps leases and
// keys on disk and restarts every lease's clock when it takes the lead: the
// holding survives, the holder renews through the new server, the waiter keeps
// its place and gets the lock when the holder releases it, and later tokens
// stay above earlier ones.
func TestFaultServerRestart(t *testing.T) {
	const ttl = 5 * time.Second
	e := testserver.StartEtcd(t)
	obs := newEtcd(t, e.Addr)
	key := testKey(t)
	ctx := ctxT(t, 60*time.Second)
	newC := func(opts ...dlock.Option) *Client {
		t.Helper()
		c, err := New(newEtcd(t, e.Addr), append([]dlock.Option{dlock.WithTTL(ttl)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	h, err := newC(dlock.WithAutoRenew(true), dlock.WithRenewEvery(300*time.Millisecond)).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	next := queuedWatch(t, ctx, obs, key)
	// The restart comes while the waiter waits, after its queueing attempt has
	// returned. (A restart that loses that attempt's reply is another fault: the
	// attempt's clean-up revokes the lease its entry landed with, and the next
	// attempt queues the waiter again, at the back.)
	wd := &attempted{Driver: newDriver(t, e.Addr), first: make(chan struct{})}
	waiter, err := dlock.NewClient(wd, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waited := lockAsync(ctx, waiter, key)
	next()
	select {
	case <-wd.first:
	case <-ctx.Done():
		t.Fatal("the waiter's first attempt never returned")
	}
	before := entries(t, obs, key)
	hkv, _ := entryKV(t, obs, key, h.Owner())
	wkv, _ := entryKV(t, obs, key, before[1])

	down := time.Now()
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	ttlResp, err := obs.TimeToLive(ctx, clientv3.LeaseID(hkv.Lease))
	if err != nil || ttlResp.TTL <= 0 {
		t.Fatalf("holder's lease after the restart: %v %v", ttlResp, err)
	}
	// A renewal that started after the restart moves the deadline beyond this.
	renewedBy := up.Add(ttl - time.Duration(float64(ttl)*0.01) - 2*time.Millisecond)
	for limit := time.Now().Add(10 * time.Second); !h.Deadline().After(renewedBy); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(limit) || h.Err() != nil {
			t.Fatalf("no renewal after the restart: %v", h.Err())
		}
	}
	renewed := time.Now()
	select {
	case r := <-waited:
		t.Fatalf("the waiter's Lock returned while the lock was held: %v", r.err)
	default:
	}
	if got := entries(t, obs, key); len(got) != 2 {
		var err error
		select {
		case r := <-waited:
			err = r.err
		case <-time.After(3 * time.Second):
		}
		t.Fatalf("entries %v after the restart, were %v; waiter: %v", got, before, err)
	}
	for _, kv := range []*mvccpb.KeyValue{hkv, wkv} {
		now, _ := entryKV(t, obs, key, strings.TrimPrefix(string(kv.Key), QueuePrefix(key)))
		if now.CreateRevision != kv.CreateRevision {
			t.Fatalf("entry %s written anew across the restart: revision %d, was %d", kv.Key, now.CreateRevision, kv.CreateRevision)
		}
	}
	released := time.Now()
	if err := retryUnavailable(ctx, func() error { return h.Unlock(ctx) }); err != nil {
		t.Fatalf("holder's Unlock after the restart: %v", err)
	}
	r := awaitLock(t, ctx, waited)
	if r.l.Token() != uint64(wkv.CreateRevision) || r.l.Token() <= h.Token() {
		t.Fatalf("waiter's token %d, want its entry's revision %d, above the holder's %d", r.l.Token(), wkv.CreateRevision, h.Token())
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, err := newC().TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Token() <= r.l.Token() {
		t.Fatalf("token %d after the restart not above %d", fresh.Token(), r.l.Token())
	}
	if err := fresh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, obs, key); len(got) != 0 {
		t.Fatalf("entries left: %v", got)
	}
	summary(t, "ttl=%v restart-took=%s holder-lease-ttl-after-restart=%ds up-to-renewed=%s (renew every 300ms) entries-kept=2 release-to-waiter-acquired=%s tokens: holder=%d waiter=%d fresh=%d",
		ttl, msSince(down, up), ttlResp.TTL, msSince(up, renewed), msSince(released, r.at), h.Token(), r.l.Token(), fresh.Token())
}

// TestFaultWaiterKilled: a waiter process killed with SIGKILL while it waits
// first in line leaves its entry only until its lease expires; the waiter
// behind it is woken by that deletion and gets the lock.
func TestFaultWaiterKilled(t *testing.T) {
	obs := newEtcd(t)
	key := testKey(t)
	ctx := ctxT(t, 30*time.Second)
	h, err := newClient(t, dlock.WithTTL(10*time.Second)).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	next := queuedWatch(t, ctx, obs, key)
	child := startProc(t, "wait", "ADDR="+srv.Addr, "KEY="+key, "TTL=1000")
	next()
	waited := lockAsync(ctx, newClient(t, dlock.WithTTL(5*time.Second)), key)
	next()
	q := entries(t, obs, key)
	if len(q) != 3 || q[0] != h.Owner() {
		t.Fatalf("queue %v, want the holder, the helper and the waiter", q)
	}
	_, rev := entryKV(t, obs, key, q[1])
	gone := deletion(t, obs, EntryKey(key, q[1]), rev+1)

	child.signal(t, syscall.SIGKILL)
	killed := time.Now()
	// The dead waiter is first in line now.
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	del := awaitDeletion(t, gone, 10*time.Second)
	r := awaitLock(t, ctx, waited)
	defer r.l.Unlock(ctx)
	if got := entries(t, obs, key); len(got) != 1 || got[0] != q[2] {
		t.Fatalf("entries %v, want the new holder's alone", got)
	}
	summary(t, "waiter-lease=1s kill-to-entry-gone=%s entry-gone-to-next-acquired=%s kill-to-next-acquired=%s entries-left-of-dead-waiter=0",
		msSince(killed, del.at), msSince(del.at, r.at), msSince(killed, r.at))
}
