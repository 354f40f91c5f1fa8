// Package adapt is the part of dlockrueidis's Transports that rueidis and
// valkey-go share: each gives its client's command and receive calls, and
// adapt makes a redislock.Transport of them, with subscriptions that follow
// redislock.Subscription's contract (each channel received by a call of the
// client's Receive of its own, which the client routes to the Cluster node
// of its slot; a call that ends is made again, and its confirmation wakes
// the waiters).
package adapt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
)

// Client is what a Transport needs of a rueidis or valkey-go client.
type Client struct {
	// Do runs a command line whose keys are args[first:first+keys].
	Do func(ctx context.Context, args []string, first, keys int) (any, error)
	// Receive subscribes (cmd: SUBSCRIBE, SSUBSCRIBE or PSUBSCRIBE) to one
	// channel or pattern and calls msg for each message and sub for each
	// confirmation until ctx ends or the connection fails.
	Receive func(ctx context.Context, cmd, channel string, msg func(redislock.Push), sub func(redislock.Push)) error
	// Unsubscribe sends cmd (UNSUBSCRIBE, SUNSUBSCRIBE or PUNSUBSCRIBE) of
	// one channel or pattern: a Receive call that ends leaves the server's
	// subscription in place.
	Unsubscribe func(ctx context.Context, cmd, channel string) error
	// Closed reports whether err says that the client is closed.
	Closed func(err error) bool
	// Cluster and DB are as redislock.Transport's.
	Cluster bool
	DB      int
}

// Transport returns the redislock.Transport over c.
func Transport(c *Client) redislock.Transport { return transport{c} }

type transport struct{ c *Client }

func (t transport) Do(ctx context.Context, args []string, first, keys int) (any, error) {
	return t.c.Do(ctx, args, first, keys)
}

func (t transport) Cluster() bool { return t.c.Cluster }
func (t transport) DB() int       { return t.c.DB }

func (t transport) Subscribe(sharded bool) redislock.Subscription {
	cmd := "SUBSCRIBE"
	if sharded {
		cmd = "SSUBSCRIBE"
	}
	return &subscription{c: t.c, cmd: cmd, out: make(chan item), done: make(chan struct{}), subs: map[string]context.CancelFunc{}}
}

// item is what a channel's receiving goroutine hands to Receive.
type item struct {
	push redislock.Push
	err  error
}

// subscription is a redislock.Subscription: a goroutine per channel or
// pattern, each in a Receive call of the client.
type subscription struct {
	c    *Client
	cmd  string // for channels
	out  chan item
	done chan struct{} // closed by Close

	mu     sync.Mutex
	subs   map[string]context.CancelFunc // by command and channel
	closed bool
	wg     sync.WaitGroup
}

func (s *subscription) Subscribe(_ context.Context, channels ...string) error {
	return s.add(s.cmd, channels)
}

func (s *subscription) PSubscribe(_ context.Context, patterns ...string) error {
	return s.add("PSUBSCRIBE", patterns)
}

func (s *subscription) add(cmd string, names []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return redislock.ErrTransportClosed
	}
	for _, n := range names {
		id := cmd + " " + n
		if s.subs[id] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		s.subs[id] = cancel
		s.wg.Add(1)
		go s.receive(ctx, cmd, n)
	}
	return nil
}

func (s *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	var errs []error
	for _, n := range channels {
		id := s.cmd + " " + n
		s.mu.Lock()
		cancel := s.subs[id]
		delete(s.subs, id)
		s.mu.Unlock()
		if cancel != nil {
			cancel()
			errs = append(errs, s.c.Unsubscribe(ctx, "UN"+s.cmd, n))
		}
	}
	return errors.Join(errs...)
}

// receive runs the Receive call of one channel until ctx ends, making it
// again after the connection failed.
func (s *subscription) receive(ctx context.Context, cmd, name string) {
	defer s.wg.Done()
	backoff := 10 * time.Millisecond
	send := func(it item) {
		select {
		case s.out <- it:
		case <-ctx.Done():
		case <-s.done:
		}
	}
	var confirmed atomic.Bool // the last Receive call was subscribed
	for {
		confirmed.Store(false)
		err := s.c.Receive(ctx, cmd, name,
			func(p redislock.Push) { send(item{push: p}) },
			func(p redislock.Push) {
				// Called by the client's reading goroutine, which must
				// not wait for Receive: handed over by a goroutine.
				confirmed.Store(true)
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					send(item{push: p})
				}()
			})
		if ctx.Err() != nil {
			return
		}
		if confirmed.Load() {
			backoff = 10 * time.Millisecond
		}
		if err == nil {
			err = errors.New("dlockrueidis: subscription ended")
		}
		send(item{err: fmt.Errorf("dlockrueidis: %s %s: %w", cmd, name, err)})
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// closeCheck is how often a Receive on a subscription with no channel
// checks that its client is still open (a PING, which a closed client
// refuses without I/O): no Receive call of the client is left to tell it
// otherwise, and redislock closes such a connection after some seconds.
const closeCheck = 250 * time.Millisecond

func (s *subscription) Receive(ctx context.Context) (redislock.Push, error) {
	t := time.NewTimer(closeCheck)
	defer t.Stop()
	for {
		select {
		case it := <-s.out:
			if it.err != nil && s.c.Closed(it.err) {
				return redislock.Push{}, fmt.Errorf("%w: %w", redislock.ErrTransportClosed, it.err)
			}
			return it.push, it.err
		case <-s.done:
			return redislock.Push{}, redislock.ErrTransportClosed
		case <-ctx.Done():
			return redislock.Push{}, ctx.Err()
		case <-t.C:
			s.mu.Lock()
			idle := len(s.subs) == 0
			s.mu.Unlock()
			if idle {
				// A closed client answers at once, without I/O.
				if _, err := s.c.Do(ctx, []string{"PING"}, 1, 0); err != nil && s.c.Closed(err) {
					return redislock.Push{}, fmt.Errorf("%w: %w", redislock.ErrTransportClosed, err)
				}
			}
			t.Reset(closeCheck)
		}
	}
}

// Close ends every Receive call and waits for their goroutines.
func (s *subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for id, cancel := range s.subs {
		cancel()
		delete(s.subs, id)
	}
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Reader is what both clients' replies are read through: rueidis's and
// valkey-go's RedisMessage.
type Reader[M any] interface {
	*M
	IsNil() bool
	IsInt64() bool
	IsBool() bool
	IsArray() bool
	Error() error
	ToString() (string, error)
	AsInt64() (int64, error)
	AsBool() (bool, error)
	ToArray() ([]M, error)
	AsFloat64() (float64, error)
}

// Value returns the reply m as redislock.Transport's Do returns it; isErr
// reports a server error reply and its text.
func Value[M any, P Reader[M]](m P, isErr func(error) (string, bool)) (any, error) {
	switch {
	case m.IsNil():
		return nil, nil
	case m.IsInt64():
		return m.AsInt64()
	case m.IsBool():
		b, err := m.AsBool()
		if err != nil || !b {
			return nil, err
		}
		return int64(1), nil
	case m.IsArray():
		elems, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]any, len(elems))
		for i := range elems {
			e := P(&elems[i])
			if text, ok := isErr(e.Error()); ok {
				out[i] = redislock.ServerError(text)
				continue
			}
			if out[i], err = Value(e, isErr); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if s, err := m.ToString(); err == nil {
		return s, nil
	}
	if f, err := m.AsFloat64(); err == nil {
		return fmt.Sprint(f), nil
	}
	return nil, fmt.Errorf("dlockrueidis: unexpected reply %v", m)
}

// Reply returns a command's reply m, or its error err, as Transport's Do
// returns them: isNil reports the nil reply's error, isErr a server error
// reply and its text.
func Reply[M any, P Reader[M]](m P, err error, isNil func(error) bool, isErr func(error) (string, bool)) (any, error) {
	switch {
	case err == nil:
		return Value(m, isErr)
	case isNil(err):
		return nil, nil
	}
	return nil, Err(err, isErr)
}

// Err returns err as Transport's Do returns it: a server error reply as a
// redislock.ServerError.
func Err(err error, isErr func(error) (string, bool)) error {
	if text, ok := isErr(err); ok {
		return redislock.ServerError(text)
	}
	return err
}

// Confirmed returns the Push of a subscription's confirmation.
func Confirmed(kind, channel string) redislock.Push {
	return redislock.Push{Kind: kind, Channel: channel}
}

// Message returns the Push of a message.
func Message(channel, payload string) redislock.Push {
	return redislock.Push{Kind: "message", Channel: channel, Payload: payload}
}

// Conn is a rueidis or valkey-go client, whose commands are of type C, its
// replies R (read as messages M) and its pub/sub messages P.
type Conn[C, R, P any] interface {
	Do(ctx context.Context, cmd C) R
	Receive(ctx context.Context, subscribe C, fn func(P)) error
}

// Result is a rueidis or valkey-go result.
type Result[M any] interface{ ToMessage() (M, error) }

// Kit is what differs between rueidis and valkey-go beyond their types: how
// a command is built, how a subscription confirmation is heard and a message
// read, and how errors are told apart.
type Kit[C, P any] struct {
	// Command builds the command line args, whose keys are args[first:first+keys].
	Command func(args []string, first, keys int) C
	// Subscribe builds SUBSCRIBE, SSUBSCRIBE and PSUBSCRIBE of one channel
	// or pattern, and Unsubscribe the UNSUBSCRIBE and SUNSUBSCRIBE of one
	// channel.
	Subscribe, SSubscribe, PSubscribe func(string) C
	Unsubscribe, SUnsubscribe         func(string) C
	// Hook returns ctx with a hook that calls fn on each confirmation.
	Hook func(ctx context.Context, fn func(kind, channel string)) context.Context
	// Message returns a message's channel and payload.
	Message func(P) (channel, payload string)
	// IsNil reports the nil reply; ServerError a server error reply and its
	// text; Closing the error of a closed client.
	IsNil       func(error) bool
	ServerError func(error) (string, bool)
	Closing     error
}

// New returns the Client over c; cluster and db are as Client's.
func New[C any, R Result[M], P, M any, MP Reader[M]](c Conn[C, R, P], k Kit[C, P], cluster bool, db int) *Client {
	return &Client{
		Do: func(ctx context.Context, args []string, first, keys int) (any, error) {
			m, err := c.Do(ctx, k.Command(args, first, keys)).ToMessage()
			return Reply[M, MP](&m, err, k.IsNil, k.ServerError)
		},
		Receive: func(ctx context.Context, cmd, channel string, msg, sub func(redislock.Push)) error {
			subscribe := k.Subscribe
			switch cmd {
			case "SSUBSCRIBE":
				subscribe = k.SSubscribe
			case "PSUBSCRIBE":
				subscribe = k.PSubscribe
			}
			ctx = k.Hook(ctx, func(kind, channel string) { sub(Confirmed(kind, channel)) })
			err := c.Receive(ctx, subscribe(channel), func(p P) { msg(Message(k.Message(p))) })
			return Err(err, k.ServerError)
		},
		Unsubscribe: func(ctx context.Context, cmd, channel string) error {
			unsubscribe := k.Unsubscribe
			if cmd == "UNSSUBSCRIBE" {
				unsubscribe = k.SUnsubscribe
			}
			_, err := c.Do(ctx, unsubscribe(channel)).ToMessage()
			return Err(err, k.ServerError)
		},
		Closed:  func(err error) bool { return errors.Is(err, k.Closing) },
		Cluster: cluster,
		DB:      db,
	}
}

// NewClient returns a Client of the plain lock over t, or err.
func NewClient(t redislock.Transport, err error, opts []dlock.Option) (*dlock.Client, error) {
	if err != nil {
		return nil, err
	}
	return redislock.NewOver(t, opts...)
}
