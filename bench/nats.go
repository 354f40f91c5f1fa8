package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/natslock"
	"github.com/dlock-go/dlock/natslock/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// onNATS names NATS as the server a variant locks on.
const onNATS = "nats"

// natsServerFlag makes the bench binary a NATS server (see startNATS).
const natsServerFlag = "-nats-server"

// natsSyncEnv, set to "default", runs the bench's NATS server with its
// default sync (see natsServerMain).
const natsSyncEnv = "BENCH_NATS_SYNC"

// natsServerMain runs one NATS server with JetStream whose store lives under
// dir, prints its URL, and runs until stdin closes or a signal comes. It
// syncs every write, as natslock's docs ask, unless BENCH_NATS_SYNC is
// "default" (the server's own default: a sync every two minutes).
func natsServerMain(dir string) error {
	s, err := natstest.Start(dir, natstest.Options{SyncAlways: os.Getenv(natsSyncEnv) != "default"})
	if err != nil {
		return err
	}
	defer s.Shutdown()
	fmt.Println(s.URL)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		stop()
	}()
	<-ctx.Done()
	return nil
}

// natsProc is the bench's NATS server: this binary again, in a process of its
// own so that its CPU time can be read.
type natsProc struct {
	cmd *exec.Cmd
	URL string
}

// startNATS runs the NATS server of a run under dir.
func startNATS(dir string) (*natsProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, natsServerFlag, dir+"/nats")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	_ = in // closed by stop, which ends the server
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("bench: the NATS server did not start: %w", err)
	}
	p := &natsProc{cmd: cmd, URL: strings.TrimSpace(line)}
	nc, js, err := p.connect(nil)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
		var d *natslock.Driver
		if d, err = natslock.NewDriver(js); err == nil {
			err = d.Migrate(ctx)
		}
		var f *natslock.FairDriver
		if err == nil {
			if f, err = natslock.NewFairDriver(js); err == nil {
				err = f.Migrate(ctx)
			}
		}
		cancel()
		nc.Close()
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *natsProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
}

// natsSent counts the messages the measured NATS connections have sent (each
// publish, read or subscription request is one): closed connections' in
// natsClosed, open ones' read from their statistics.
var (
	natsMu     sync.Mutex
	natsOpen   = map[*nats.Conn]bool{}
	natsClosed atomic.Int64
)

func natsRequests() int64 {
	natsMu.Lock()
	defer natsMu.Unlock()
	n := natsClosed.Load()
	for nc := range natsOpen {
		n += int64(nc.Stats().OutMsgs)
	}
	return n
}

// connect opens a connection of its own to the server, counted in cnt's
// dials and in natsRequests when cnt is set.
func (p *natsProc) connect(cnt *cmdCounter) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(p.URL, nats.Timeout(connectTimeout))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if cnt != nil {
		cnt.dials.Add(1)
		natsMu.Lock()
		natsOpen[nc] = true
		natsMu.Unlock()
	}
	return nc, js, nil
}

// closeCounted closes nc and keeps the messages it sent in natsRequests.
func closeCounted(nc *nats.Conn) {
	natsMu.Lock()
	defer natsMu.Unlock()
	if natsOpen[nc] {
		delete(natsOpen, nc)
		nc.Close()
		natsClosed.Add(int64(nc.Stats().OutMsgs))
		return
	}
	nc.Close()
}

// natsConn opens a counted connection to the run's NATS server.
func natsConn(o opening) (*nats.Conn, jetstream.JetStream, error) {
	if o.e == nil || o.e.cons.nats == nil {
		return nil, nil, errors.New("bench: no NATS server in this run")
	}
	return o.e.cons.nats.connect(o.cnt)
}

// openNATS opens a natslock Client on a connection of its own.
func openNATS(o opening) (locker, error) {
	return openNATSWith(o, func(js jetstream.JetStream) (natsDriver, error) { return natslock.NewDriver(js) })
}

// openNATSFair opens a natslock Client of fair locks on a connection of its
// own.
func openNATSFair(o opening) (locker, error) {
	return openNATSWith(o, func(js jetstream.JetStream) (natsDriver, error) { return natslock.NewFairDriver(js) })
}

// natsDriver is a natslock driver of either kind.
type natsDriver interface {
	driver.Driver
	Close()
}

// openNATSWith opens a Client over the driver that newd makes on a
// connection of its own.
func openNATSWith(o opening, newd func(jetstream.JetStream) (natsDriver, error)) (locker, error) {
	nc, js, err := natsConn(o)
	if err != nil {
		return nil, err
	}
	d, err := newd(js)
	if err != nil {
		closeCounted(nc)
		return nil, err
	}
	c, err := dlock.NewClient(d)
	if err != nil {
		closeCounted(nc)
		return nil, err
	}
	return natsLocker{dlockLocker{c: c, close: func() error { d.Close(); closeCounted(nc); return nil }}}, nil
}

// natsLocker is a natslock Client whose keys are the bench's with ':'
// spelled '.': NATS subjects have no ':'.
type natsLocker struct{ dlockLocker }

func (l natsLocker) mutex(key string) mutex { return l.dlockLocker.mutex(natsKey(key)) }

// natsKey is key as a NATS key-value bucket can hold it.
func natsKey(key string) string { return strings.ReplaceAll(key, ":", ".") }

// natsRecipeVariant is the lock a NATS user writes by hand on the same
// bucket: KeyValue.Create with a key TTL, polled every fixedRetry while the
// key exists, and Delete at the created revision.
var natsRecipeVariant = variant{name: "nats/recipe", lib: "nats-recipe", peer: true, retry1ms: true,
	in: inA | inBC, on: onNATS, clientEach: true,
	desc: "jetstream KeyValue.Create(key, KeyTTL(10s)) polled every 1ms while the key exists, Delete(key, LastRevision(rev)); a connection of its own per locker",
	open: openNATSRecipe}

func openNATSRecipe(o opening) (locker, error) {
	nc, js, err := natsConn(o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, natslock.DefaultBucket)
	if err != nil {
		closeCounted(nc)
		return nil, err
	}
	return natsRecipe{nc: nc, kv: kv}, nil
}

type natsRecipe struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

func (r natsRecipe) Close() error { closeCounted(r.nc); return nil }

func (natsRecipe) notified() bool { return false }

func (r natsRecipe) mutex(key string) mutex { return &natsRecipeMutex{kv: r.kv, key: natsKey(key)} }

type natsRecipeMutex struct {
	kv  jetstream.KeyValue
	key string
	rev uint64
}

func (m *natsRecipeMutex) lock(ctx context.Context) error {
	tick := time.NewTicker(fixedRetry)
	defer tick.Stop()
	for {
		rev, err := m.kv.Create(ctx, m.key, []byte("held"), jetstream.KeyTTL(peerTTL))
		switch {
		case err == nil:
			m.rev = rev
			return nil
		case ctx.Err() != nil:
			return errors.Join(errNotObtained, err)
		case !errors.Is(err, jetstream.ErrKeyExists):
			return err
		}
		select { // the key exists: try again at the next tick
		case <-tick.C:
		case <-ctx.Done():
			return errors.Join(errNotObtained, ctx.Err())
		}
	}
}

func (m *natsRecipeMutex) unlock(ctx context.Context) error {
	return m.kv.Delete(ctx, m.key, jetstream.LastRevision(m.rev))
}
