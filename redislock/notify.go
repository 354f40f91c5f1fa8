package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// idleLinger is how long a subscription connection with no channel left stays
// open, so that bursts of contention do not each open a new connection.
const idleLinger = 10 * time.Second

// channelLinger is how long a key's channel stays subscribed after its last
// waiter left, so that a key contended again at once needs no new subscription.
// Meanwhile the holdings the Client takes of the key wake on release (one
// message, no round trip), since a waiter may register at any moment.
const channelLinger = time.Second

// refusedRetry is how long a hub whose subscription the server refused (an ACL
// without channel permissions) lets its waiters poll before it tries again.
const refusedRetry = time.Minute

// passWait bounds how long a waiter that leaves waits for its process to have
// left the plain lock's waiting set (see hub.subscribe).
const passWait = 3 * time.Second

// hub is the notification side of the drivers over one go-redis client: one
// subscription connection (one per master on Redis Cluster, with sharded
// pub/sub) shared by every waiter on every key, subscribing a key's channel while
// it has waiters. No network I/O happens under its mutex: each connection has a
// writer goroutine that sends the SUBSCRIBE and UNSUBSCRIBE commands in order, and
// a waiter does not wait for its subscription to be written: the server's
// confirmation wakes every waiter of the channel, which covers a release that
// came before it.
//
// A message on a channel wakes one local waiter: the oldest whose wake channel is
// empty when the payload is empty (a plain lock became free: its release
// publishes on the woken Client's own channel), every waiter when it is "*", or
// the waiter named by the payload (a fair lock was handed to it). A waiter that leaves without having used a wake passes it on. A
// subscription confirmed by the server, first or again after the connection
// dropped and go-redis reconnected, wakes every waiter of the key: messages may
// have been missed. A subscription the server refuses (NOPERM) closes the wake
// channels of the connection's waiters, which then poll, and is logged; so is a
// wake-up that a release could not publish.
type hub struct {
	w       wire
	sharded bool
	id      string // names this hub (process) in the waiting sets of plain locks

	mu          sync.Mutex
	topics      map[string]*topic   // by channel
	conns       map[string]*subConn // by master address ("" without Cluster)
	refusal     error               // the server refused a subscription...
	refusedTill time.Time           // ...and Subscribe fails until then
	pubWarned   bool                // a failed wake-up publish was logged

	// The holdings watched for pushed losses (loss.go).
	holds           driver.Holds // its own lock; taken inside mu, never around it
	loss            *lossWatch   // the loss subscription; nil when closed
	lossRefusedTill time.Time    // the server refused it: not again until then
	lossNoKeyspace  bool         // the server refused the keyspace pattern: dlock:lost alone
}

type topic struct {
	channel string
	key     string // the lock's name
	score   string // this hub's arrival in the lock's waiting set ("" when not on it)
	popped  bool   // a release took this hub off the set to wake it (score is kept to join again)
	conn    *subConn
	waiters []*waiter // in registration order
	owners  map[string]*waiter
	expiry  time.Time   // the holder's expiry as last reported to a waiter here
	idle    *time.Timer // detaches the topic after channelLinger without waiters
}

type waiter struct {
	owner  string
	wake   chan struct{}
	woken  bool // a wake was sent and no attempt has been made since
	closed bool // wake is closed: notifications stopped, the waiter polls
	subs   int  // Subscribe calls holding this registration (0 or 1)
}

type subConn struct {
	addr   string
	ps     Subscription
	topics int
	idle   *time.Timer
	closed bool
	ops    []subOp       // commands for the writer, in order
	kick   chan struct{} // wakes the writer; closed with the connection
}

// subOp is a SUBSCRIBE (sub) or UNSUBSCRIBE of channel, or a command to run
// (fn), for the writer, which closes done (when not nil) once the op has run
// or will never run.
type subOp struct {
	sub     bool
	channel string
	fn      func(ctx context.Context)
	done    chan struct{}
}

func newHub(w wire) *hub {
	var b [8]byte
	_, _ = rand.Read(b[:])
	h := &hub{w: w, sharded: w.sharded(), id: hex.EncodeToString(b[:]), topics: map[string]*topic{}, conns: map[string]*subConn{}}
	h.initHolds()
	return h
}

// publishArg is publishCmd ready for a command line (a constant, which boxing
// does not copy).
func (h *hub) publishArg() any {
	if h.sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// publishCmd is the command the release scripts wake waiters with.
func (h *hub) publishCmd() string {
	if h.sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// publishFailed reports, once per hub, a release whose wake-up the server
// refused: waiters in other processes then wake at the holder's TTL at the latest.
func (h *hub) publishFailed(reply string) {
	h.mu.Lock()
	warned := h.pubWarned
	h.pubWarned = true
	h.mu.Unlock()
	if !warned {
		slog.Warn("redislock: a release could not publish its wake-up; waiters elsewhere wake at the holder's TTL (check the ACL's channel permissions)", "reply", reply)
	}
}

// refused returns the error of a refused subscription while waiters must poll;
// h.mu is held.
func (h *hub) refused() error {
	if h.refusal != nil && time.Now().Before(h.refusedTill) {
		return h.refusal
	}
	h.refusal = nil
	return nil
}

// subscribe registers owner as a waiter for the lock named key, woken by the
// messages on channel (the lock's, or this hub's own for the plain lock).
func (h *hub) subscribe(ctx context.Context, key, channel, owner string) (<-chan struct{}, func(), error) {
	h.mu.Lock()
	if err := h.refused(); err != nil {
		h.mu.Unlock()
		return nil, nil, err
	}
	t := h.topics[channel]
	if t == nil {
		h.mu.Unlock()
		addr, open, err := h.w.node(ctx, channel)
		if err != nil {
			return nil, nil, err
		}
		h.mu.Lock()
		if err := h.refused(); err != nil {
			h.mu.Unlock()
			return nil, nil, err
		}
		if t = h.topics[channel]; t == nil {
			t = &topic{channel: channel, key: key, conn: h.conn(addr, open), owners: map[string]*waiter{}}
			h.attach(t)
		}
	}
	w := t.find(owner)
	if w == nil {
		w = t.add(owner)
	}
	w.subs++
	t.busy()
	h.mu.Unlock()
	var once sync.Once
	return w.wake, func() {
		once.Do(func() {
			// A waiter whose leaving takes its process off the plain lock's
			// waiting set (or passes on a wake it was sent) returns once that
			// is done: a process that exits right after its Lock gave up
			// must leave no entry that a release would wake in vain.
			if done := h.leave(t, w); done != nil {
				timer := time.NewTimer(passWait)
				defer timer.Stop()
				select {
				case <-done:
				case <-timer.C:
				}
			}
		})
	}, nil
}

// conn returns the subscription connection to addr, opening it if needed (the
// dial happens on first use, in its goroutines); h.mu is held.
func (h *hub) conn(addr string, open func(sharded bool) Subscription) *subConn {
	if c := h.conns[addr]; c != nil {
		return c
	}
	c := &subConn{addr: addr, ps: open(h.sharded), kick: make(chan struct{}, 1)}
	h.conns[addr] = c
	go h.receive(c)
	go h.writer(c)
	return c
}

// attach registers t and has its channel subscribed; h.mu is held.
func (h *hub) attach(t *topic) {
	c := t.conn
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	c.topics++
	h.topics[t.channel] = t
	c.queue(subOp{sub: true, channel: t.channel})
}

// queue hands op to c's writer; h.mu is held.
func (c *subConn) queue(op subOp) {
	if c.closed {
		if op.done != nil {
			close(op.done)
		}
		return
	}
	c.ops = append(c.ops, op)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// writer sends c's SUBSCRIBE and UNSUBSCRIBE commands in order, and closes c's
// PubSub once c is closed. A write that fails leaves the channel in the PubSub's
// set: go-redis subscribes it again when it reconnects, and the confirmation wakes
// the waiters.
func (h *hub) writer(c *subConn) {
	defer c.ps.Close()
	for range c.kick {
		for {
			h.mu.Lock()
			if c.closed || len(c.ops) == 0 {
				h.mu.Unlock()
				break
			}
			op := c.ops[0]
			c.ops = c.ops[1:]
			h.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			switch {
			case op.fn != nil:
				op.fn(ctx)
				if op.done != nil {
					close(op.done)
				}
			case op.sub:
				_ = c.ps.Subscribe(ctx, op.channel)
			default:
				_ = c.ps.Unsubscribe(ctx, op.channel)
			}
			cancel()
		}
	}
}

func (t *topic) find(owner string) *waiter { return t.owners[owner] }

// busy stops the linger of t, which has a waiter again; h.mu is held.
func (t *topic) busy() {
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
}

// add registers a new waiter for owner; h.mu is held.
func (t *topic) add(owner string) *waiter {
	w := &waiter{owner: owner, wake: make(chan struct{}, 1)}
	t.waiters = append(t.waiters, w)
	t.owners[owner] = w
	return w
}

// leave unregisters w; a wake it was sent but never used goes to the next
// waiter. It returns what remove returns.
func (h *hub) leave(t *topic, w *waiter) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.subs--
	if w.subs > 0 {
		return nil
	}
	return h.remove(t, w)
}

// remove takes w off t, and t off its connection once it has no waiter; h.mu
// is held. When that takes this process off the plain lock's waiting set, or
// passes a wake on, it returns a channel closed once the writer has done it
// (or never will), else nil.
func (h *hub) remove(t *topic, w *waiter) (done <-chan struct{}) {
	for i, x := range t.waiters {
		if x == w {
			t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
			break
		}
	}
	delete(t.owners, w.owner)
	if w.woken {
		t.wakeOne()
	}
	if len(t.waiters) == 0 && (t.score != "" || w.woken) {
		// Nobody here waits any more: leave the waiting set, and pass on a
		// wake that nobody used.
		t.score = ""
		done = h.pass(t, w.woken)
	}
	if len(t.waiters) > 0 || h.topics[t.channel] != t || t.idle != nil {
		return done
	}
	t.idle = time.AfterFunc(channelLinger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(t.waiters) == 0 && h.topics[t.channel] == t {
			h.detach(t)
		}
	})
	return done
}

// pass has this hub leave the waiting set of t's plain lock and, with wake, wake
// the next waiting process if the lock is free: a wake that came to this
// process when none of its waiters could use it; h.mu is held. It returns a
// channel closed once that is done (or never will be).
func (h *hub) pass(t *topic, wake bool) <-chan struct{} { return h.passKey(t.conn, t.key, wake) }

// passKey is pass for the plain lock named key, run by c's writer; h.mu is held.
func (h *hub) passKey(c *subConn, key string, wake bool) <-chan struct{} {
	pass := "0"
	if wake {
		pass = "1"
	}
	done := make(chan struct{})
	c.queue(subOp{fn: func(ctx context.Context) {
		_ = redisscript.Pass.Run(ctx, h.w, []string{LockKey(key), waitingKey(key)},
			h.id, pass, h.publishCmd(), wakeChannel(key)).Err()
	}, done: done})
	return done
}

// detach unsubscribes t's channel; h.mu is held.
func (h *hub) detach(t *topic) {
	t.busy()
	delete(h.topics, t.channel)
	c := t.conn
	c.topics--
	c.queue(subOp{channel: t.channel})
	h.lingerOrClose(c)
}

// lingerOrClose closes c after idleLinger if it has no channel by then; h.mu is held.
func (h *hub) lingerOrClose(c *subConn) {
	if c.topics > 0 || c.idle != nil || c.closed {
		return
	}
	c.idle = time.AfterFunc(idleLinger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if c.topics == 0 && !c.closed {
			h.closeConn(c)
		}
	})
}

// closeConn closes c: its writer closes the PubSub, and its receive loop then
// ends; h.mu is held.
func (h *hub) closeConn(c *subConn) {
	if c.closed {
		return
	}
	c.closed = true
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	if h.conns[c.addr] == c {
		delete(h.conns, c.addr)
	}
	for _, op := range c.ops {
		if op.done != nil {
			close(op.done) // the writer stops: it will not run
		}
	}
	c.ops = nil
	close(c.kick)
}

// refuse handles a subscription refused by the server on c: every waiter of c
// polls from now on (its wake channel is closed), c is closed, and Subscribe
// fails for refusedRetry; h.mu is held.
func (h *hub) refuse(c *subConn, err error) {
	if h.refusal == nil {
		slog.Warn("redislock: the server refused a wake-up subscription; waiters poll (check the ACL's channel permissions)", "err", err)
	}
	h.refusal = fmt.Errorf("redislock: wake-up subscription refused: %w", mapErr(err))
	h.refusedTill = time.Now().Add(refusedRetry)
	for ch, t := range h.topics {
		if t.conn != c {
			continue
		}
		for _, w := range t.waiters {
			if !w.closed {
				w.closed = true
				close(w.wake)
			}
		}
		t.busy()
		delete(h.topics, ch)
	}
	c.topics = 0
	h.closeConn(c)
}

// wakeOne wakes the oldest waiter that has no wake pending.
func (t *topic) wakeOne() { t.wakeOneBut(nil) }

// wakeOneBut wakes the oldest waiter other than but that has no wake pending,
// and reports whether there was one.
func (t *topic) wakeOneBut(but *waiter) bool {
	for _, w := range t.waiters {
		if w != but && w.send() {
			return true
		}
	}
	return false
}

func (t *topic) wakeAll() {
	for _, w := range t.waiters {
		w.send()
	}
}

func (w *waiter) send() bool {
	if w.closed {
		return false
	}
	select {
	case w.wake <- struct{}{}:
		w.woken = true
		return true
	default:
		return false
	}
}

// receive dispatches c's messages until c is closed or its client is.
func (h *hub) receive(c *subConn) {
	backoff := 10 * time.Millisecond
	for {
		msg, err := c.ps.Receive(context.Background())
		h.mu.Lock()
		if c.closed {
			h.mu.Unlock()
			return
		}
		if err != nil {
			if closedErr(err) { // the client was closed
				h.each(c, (*topic).wakeAll)
				h.closeConn(c)
				h.mu.Unlock()
				return
			}
			if refusal(err) {
				h.refuse(c, err)
				h.mu.Unlock()
				return
			}
			// Dropped: go-redis reconnects and resubscribes on the next Receive,
			// and the confirmation wakes the waiters to retry. Meanwhile they
			// sleep on the holder's TTL, as for a lost message, and so ride
			// out a short outage of the server.
			h.mu.Unlock()
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg; m.Kind {
		case "message":
			if key, ok := h.plainKey(m.Channel); ok && m.Payload == "" && h.topics[m.Channel] == nil {
				// A release woke this process after its waiters for the
				// plain lock left and the channel was let go: pass it on.
				h.passKey(c, key, true)
			}
			if t := h.topics[m.Channel]; t != nil && t.conn == c {
				switch w := t.find(m.Payload); {
				case m.Payload == "" && len(t.waiters) == 0 && m.Channel == clientWakeChannel(t.key, h.id):
					// A release woke this process after its last waiter
					// for the plain lock left: pass the wake on at once.
					h.pass(t, true)
				case m.Payload == "":
					if m.Channel == clientWakeChannel(t.key, h.id) {
						t.popped = true // the release took this process off the set
					}
					t.wakeOne()
				case m.Payload == "*":
					t.wakeAll()
				case w != nil:
					w.send()
				}
			}
		default:
			if t := h.topics[m.Channel]; t != nil && t.conn == c && (m.Kind == "subscribe" || m.Kind == "ssubscribe") {
				t.wakeAll()
			}
		}
		h.mu.Unlock()
	}
}

// waiting reports whether any waiter of this process is registered (for any
// key), so that a release with none can skip naming its channel.
func (h *hub) waiting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.topics) > 0
}

// released tells the hub that this process released (or abandoned a holding of)
// a lock whose waiters here are woken on channel: one of them tries next, with
// no message needed. The release's own message goes to the longest-waiting
// process, which may be another; a process's own waiters may have queued
// without a round trip behind the holding it just released.
func (h *hub) released(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[channel]; t != nil {
		t.wakeOne()
	}
}

// plainKey returns the name of the plain lock whose wake channel for this hub
// is channel (see clientWakeChannel).
func (h *hub) plainKey(channel string) (string, bool) {
	key, ok := strings.CutPrefix(channel, Prefix+"{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(key, "}:wake:"+h.id)
}

// refusal reports whether err is the server refusing a subscription for a
// reason that subscribing again will not cure (a reply MapErr classes as
// dlock.ErrRefused: ACL permissions, authentication, or a reply such as
// CROSSSLOT when go-redis subscribes again channels of several slots at once).
// Waiters then poll rather than sleep out their holders' TTLs.
func refusal(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && errors.Is(mapErr(err), driver.ErrRefused)
}

// each calls f on every topic of c; h.mu is held.
func (h *hub) each(c *subConn, f func(*topic)) {
	for _, t := range h.topics {
		if t.conn == c {
			f(t)
		}
	}
}

// attempt is called before an Acquire round trip by a caller that will wait, and
// returns its ticket. If the key's channel is subscribed here
// (ticket.subscribed), owner is registered at once (so that no wake can be
// missed between the attempt and its Subscribe), and ticket.othersWait is true
// when other waiters of this hub wait for the key: the new holding, if the
// attempt wins, must wake on release whoever registers meanwhile (a waiter that
// registers later makes a round trip, which marks the holding).
// ticket.arrival is this hub's arrival in the lock's waiting set ("" when it is
// not on it).
//
// A newcomer behind other local waiters of a lock whose holder is known to hold
// it gets ticket.queued: it should wait its turn (a wake) without a round trip,
// at most that long. Otherwise ticket.done must be called with the attempt's
// outcome, and the arrival score or token its reply carried.
//
// A registration made here waits for the caller's Subscribe; if ctx (the wait's)
// ends first, the caller will not subscribe, and the registration goes (passing
// on a wake it was sent), so that no waiter that is gone keeps a wake.
func (h *hub) attempt(ctx context.Context, channel, owner string, newcomerWaits bool) ticket {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil {
		return ticket{done: func(error, string, uint64) {}}
	}
	w := t.find(owner)
	others := len(t.waiters)
	if w != nil {
		w.woken = false
		others--
	} else {
		w = t.add(owner)
		t.busy()
		context.AfterFunc(ctx, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if w.subs == 0 && t.owners[w.owner] == w {
				h.remove(t, w)
			}
		})
		if left := time.Until(t.expiry); newcomerWaits && others > 0 && left > 0 {
			return ticket{subscribed: true, othersWait: true, arrival: t.score, queued: left, done: func(error, string, uint64) {}}
		}
	}
	return ticket{subscribed: true, othersWait: others > 0, arrival: t.score, onSet: t.score != "" && !t.popped, done: func(err error, score string, token uint64) {
		h.mu.Lock()
		defer h.mu.Unlock()
		var busy *driver.Taken
		switch {
		case errors.As(err, &busy):
			if busy.Remaining > 0 {
				t.expiry = time.Now().Add(busy.Remaining)
			}
			if score != "" {
				t.popped = false // the script put this process back on the set
			}
			if t.score == "" && score != "" && len(t.waiters) > 0 {
				t.score = score
			}
			return
		case err != nil:
			// The attempt tells nothing (it failed or its outcome is unknown):
			// another waiter tries in its place, or, with none, w keeps the
			// wake it may have been trying on, and passes it on if it leaves.
			defer func() {
				if !t.wakeOneBut(w) {
					w.woken = true
				}
			}()
		default:
			// Taken: the script moved this hub to the back of the waiting set
			// if others of it waited, and took it off otherwise.
			t.score, t.popped = "", false
			if others > 0 && score != "" {
				t.score = score
			}
		}
		if w.subs == 0 {
			h.remove(t, w) // registered by this call, and no wait follows
		}
	}}
}

// ticket is what the hub tells a waiting attempt (see hub.attempt).
type ticket struct {
	// subscribed is true when the hub has the wake channel subscribed: only a
	// subscribed process joins the plain lock's waiting set.
	subscribed bool
	// othersWait is true when other waiters of this process wait for the key.
	othersWait bool
	// arrival is this process's arrival in the plain lock's waiting set, ""
	// when it has none yet.
	arrival string
	// onSet is true when this process is on the plain lock's waiting set (it
	// has an arrival, and no release took it off to wake it).
	onSet bool
	// queued is how long to wait for a wake, without any attempt, behind this
	// process's earlier waiters; 0 to make the attempt.
	queued time.Duration
	// done reports the attempt's outcome: its error, the arrival the script
	// gave this process, and the fencing token of a grant.
	done func(err error, arrival string, token uint64)
}
