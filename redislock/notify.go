package redislock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// WakeChannel returns the pub/sub channel on which the waiters of the lock named
// key are woken. It carries the lock's hash tag, so that on Redis Cluster the
// sharded channel lives on the lock's shard.
func WakeChannel(key string) string { return Prefix + "{" + key + "}:wake" }

// idleLinger is how long a subscription connection with no channel left stays
// open, so that bursts of contention do not each open a new connection.
const idleLinger = 10 * time.Second

// channelLinger is how long a key's channel stays subscribed after its last
// waiter left, so that a key contended again at once needs no new subscription.
// Meanwhile the holdings the Client takes of the key wake on release (one
// message, no round trip), since a waiter may register at any moment.
const channelLinger = time.Second

// hub is the notification side of a Driver: one subscription connection (one
// per master on Redis Cluster, with sharded pub/sub) shared by every waiter of
// the Driver on every key, subscribing a key's channel while it has waiters.
//
// A message on a key's channel wakes one local waiter: the oldest whose wake
// channel is empty when the payload is empty (a plain lock became free), or the
// waiter named by the payload (a fair lock was handed to it). A waiter that
// leaves without having used a wake passes it on. A subscription confirmed by
// the server, first or again after the connection dropped and go-redis
// reconnected, wakes every waiter of the key: messages may have been missed.
type hub struct {
	rdb     redis.UniversalClient
	sharded bool

	mu     sync.Mutex
	topics map[string]*topic   // by channel
	conns  map[string]*subConn // by master address ("" without Cluster)
}

type topic struct {
	channel string
	conn    *subConn
	waiters []*waiter // in registration order
	owners  map[string]*waiter
	expiry  time.Time   // the holder's expiry as last reported to a waiter here
	idle    *time.Timer // detaches the topic after channelLinger without waiters
}

type waiter struct {
	owner string
	wake  chan struct{}
	woken bool // a wake was sent and no attempt has been made since
	subs  int  // Subscribe calls holding this registration (0 or 1)
}

type subConn struct {
	addr   string
	ps     *redis.PubSub
	topics int
	idle   *time.Timer
	closed bool
}

func newHub(rdb redis.UniversalClient) *hub {
	_, sharded := rdb.(*redis.ClusterClient)
	return &hub{rdb: rdb, sharded: sharded, topics: map[string]*topic{}, conns: map[string]*subConn{}}
}

// publishCmd is the command the release scripts wake waiters with.
func (h *hub) publishCmd() string {
	if h.sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// Subscribe implements dlock.Notifier.
func (d *Driver) Subscribe(ctx context.Context, key, owner string) (<-chan struct{}, func(), error) {
	return d.hub.subscribe(ctx, WakeChannel(key), owner)
}

func (h *hub) subscribe(ctx context.Context, channel, owner string) (<-chan struct{}, func(), error) {
	h.mu.Lock()
	t := h.topics[channel]
	if t == nil {
		h.mu.Unlock()
		addr, node, err := h.node(ctx, channel)
		if err != nil {
			return nil, nil, err
		}
		h.mu.Lock()
		if t = h.topics[channel]; t == nil {
			t = &topic{channel: channel, conn: h.conn(addr, node), owners: map[string]*waiter{}}
			if err := h.attach(ctx, t); err != nil {
				h.mu.Unlock()
				return nil, nil, err
			}
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
	return w.wake, func() { once.Do(func() { h.leave(t, w) }) }, nil
}

// node returns the client of the server that serves channel: the Cluster master
// of its slot, or the Driver's client.
func (h *hub) node(ctx context.Context, channel string) (addr string, node redis.UniversalClient, err error) {
	if _, ok := h.rdb.(*redis.Ring); ok {
		// A Ring picks a shard per channel, and go-redis panics on a PubSub
		// without one: waiters on a Ring poll.
		return "", nil, errors.New("redislock: no notifications through a redis.Ring")
	}
	if cc, ok := h.rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return "", nil, mapErr(err)
		}
		return m.Options().Addr, m, nil
	}
	return "", h.rdb, nil
}

// conn returns the subscription connection to addr, opening it if needed (the
// dial happens on first use); h.mu is held.
func (h *hub) conn(addr string, node redis.UniversalClient) *subConn {
	if c := h.conns[addr]; c != nil {
		return c
	}
	var ps *redis.PubSub
	if h.sharded {
		ps = node.SSubscribe(context.Background())
	} else {
		ps = node.Subscribe(context.Background())
	}
	c := &subConn{addr: addr, ps: ps}
	h.conns[addr] = c
	go h.receive(c)
	return c
}

// attach subscribes t's channel on its connection and registers t; h.mu is held.
func (h *hub) attach(ctx context.Context, t *topic) error {
	c := t.conn
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	// The waiter's context must not cut the write short: that would break the
	// connection shared by every other waiter.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var err error
	if h.sharded {
		err = c.ps.SSubscribe(ctx, t.channel)
	} else {
		err = c.ps.Subscribe(ctx, t.channel)
	}
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		// The connection is down; go-redis resubscribes when it reconnects and the
		// confirmation wakes the waiters then.
		err = nil
	}
	if err != nil {
		h.lingerOrClose(c)
		return mapErr(err)
	}
	c.topics++
	h.topics[t.channel] = t
	return nil
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

// leave unregisters w; a wake it was sent but never used goes to the next waiter.
func (h *hub) leave(t *topic, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.subs--
	if w.subs > 0 {
		return
	}
	h.remove(t, w)
}

// remove takes w off t, and t off its connection once it has no waiter; h.mu is held.
func (h *hub) remove(t *topic, w *waiter) {
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
	if len(t.waiters) > 0 || h.topics[t.channel] != t || t.idle != nil {
		return
	}
	t.idle = time.AfterFunc(channelLinger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(t.waiters) == 0 && h.topics[t.channel] == t {
			h.detach(t)
		}
	})
}

// detach unsubscribes t's channel; h.mu is held.
func (h *hub) detach(t *topic) {
	t.busy()
	delete(h.topics, t.channel)
	c := t.conn
	c.topics--
	if !c.closed {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if h.sharded {
			_ = c.ps.SUnsubscribe(ctx, t.channel)
		} else {
			_ = c.ps.Unsubscribe(ctx, t.channel)
		}
		cancel()
	}
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

// closeConn closes c (its receive loop then ends); h.mu is held.
func (h *hub) closeConn(c *subConn) {
	c.closed = true
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	if h.conns[c.addr] == c {
		delete(h.conns, c.addr)
	}
	_ = c.ps.Close()
}

// wakeOne wakes the oldest waiter that has no wake pending.
func (t *topic) wakeOne() {
	for _, w := range t.waiters {
		if w.send() {
			return
		}
	}
}

func (t *topic) wakeAll() {
	for _, w := range t.waiters {
		w.send()
	}
}

func (w *waiter) send() bool {
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
			if errors.Is(err, redis.ErrClosed) { // the go-redis client was closed
				h.each(c, (*topic).wakeAll)
				h.closeConn(c)
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
		switch m := msg.(type) {
		case *redis.Message:
			if t := h.topics[m.Channel]; t != nil && t.conn == c {
				if m.Payload == "" {
					t.wakeOne()
				} else if w := t.find(m.Payload); w != nil {
					w.send()
				}
			}
		case *redis.Subscription:
			if t := h.topics[m.Channel]; t != nil && t.conn == c && (m.Kind == "subscribe" || m.Kind == "ssubscribe") {
				t.wakeAll()
			}
		}
		h.mu.Unlock()
	}
}

// each calls f on every topic of c; h.mu is held.
func (h *hub) each(c *subConn, f func(*topic)) {
	for _, t := range h.topics {
		if t.conn == c {
			f(t)
		}
	}
}

// attempt is called before an Acquire round trip by a caller that will wait. If
// the key's channel is subscribed here, owner is registered at once (so that no
// wake can be missed between the attempt and its Subscribe), and mark is true:
// the new holding, if the attempt wins, must wake on release whoever registers
// meanwhile.
//
// A newcomer behind other local waiters of a lock whose holder is known to hold
// it still gets queued: it should wait its turn (a wake) without a round trip, at
// most that long. Otherwise done must be called with the attempt's outcome.
func (h *hub) attempt(channel, owner string, newcomerWaits bool) (mark bool, queued time.Duration, done func(error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil {
		return false, 0, func(error) {}
	}
	w := t.find(owner)
	if w != nil {
		w.woken = false
	} else {
		others := len(t.waiters)
		w = t.add(owner)
		t.busy()
		if left := time.Until(t.expiry); newcomerWaits && others > 0 && left > 0 {
			return true, left, nil
		}
	}
	return true, 0, func(err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		var busy *dlock.BusyError
		switch {
		case errors.As(err, &busy):
			if busy.Remaining > 0 {
				t.expiry = time.Now().Add(busy.Remaining)
			}
			return
		case err != nil:
			// The attempt tells nothing (it failed or its outcome is unknown):
			// another waiter tries in its place.
			defer t.wakeOne()
		}
		if w.subs == 0 {
			h.remove(t, w) // registered by this call, and no wait follows
		}
	}
}
