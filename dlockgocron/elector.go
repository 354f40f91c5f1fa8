package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/go-co-op/gocron/v2"
)

// ErrNotLeader is returned by Elector.IsLeader while another instance leads (or
// nobody does yet): gocron then skips the run.
var ErrNotLeader = errors.New("dlockgocron: not the leader")

// Campaign retry bounds: after a failed campaign (the store unreachable) the
// Elector waits this long before it tries again, doubling up to the maximum.
const (
	MinCampaignRetry = 100 * time.Millisecond
	MaxCampaignRetry = 5 * time.Second
)

// Elector is a gocron.Elector over a dlock.Locker: it campaigns for a role in the
// background from NewElector to Close (dlock.Campaign), and IsLeader is nil
// while it holds the leadership. IsLeader follows the leadership's loss signal:
// it reports ErrNotLeader from the moment the leadership's lease is lost, before
// another instance can win, and the Elector campaigns again. With it, the leader
// scheduler runs every job and the others none. It is safe for concurrent use.
type Elector struct {
	l    dlock.Locker
	role string
	opts []dlock.Option

	cancel context.CancelFunc
	done   chan struct{} // closed when the campaign loop has returned

	mu      sync.Mutex
	cur     *dlock.Leadership // the leadership won last; nil while campaigning
	changed chan struct{}     // closed and replaced when cur changes
	err     error             // why campaigning stopped for good
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning for role through l and returns at once. opts
// are the campaign's lock options (see dlock.Campaign): dlock.WithTTL with
// dlock.WithAutoRenew(true) sets how long a dead leader keeps the role, so the
// time another instance takes to replace it (the default is dlock.DefaultTTL);
// dlock.WithMetadata names the instance for dlock.CurrentLeader. The caller must call
// Close. It returns an error matching dlock.ErrInvalid for a nil locker or a bad
// role.
func NewElector(l dlock.Locker, role string, opts ...dlock.Option) (*Elector, error) {
	if driver.IsNil(l) {
		return nil, fmt.Errorf("%w: nil locker", dlock.ErrInvalid)
	}
	if err := driver.ValidateKey(role); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{l: l, role: role, opts: opts, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go e.campaign(ctx)
	return e, nil
}

func (e *Elector) set(ld *dlock.Leadership, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cur, e.err = ld, err
	close(e.changed)
	e.changed = make(chan struct{})
}

// campaign wins the role, waits for the leadership to end, and campaigns again,
// until ctx ends. It leaves the leadership held when ctx ends: Close resigns it.
func (e *Elector) campaign(ctx context.Context) {
	defer close(e.done)
	retry := MinCampaignRetry
	for {
		ld, err := dlock.Campaign(ctx, e.l, e.role, e.opts...)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, dlock.ErrInvalid) {
				e.set(nil, err)
				return
			}
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			retry = min(2*retry, MaxCampaignRetry)
			continue
		}
		retry = MinCampaignRetry
		e.set(ld, nil)
		select {
		case <-ld.Done():
			e.set(nil, nil)
		case <-ctx.Done():
			return
		}
	}
}

// IsLeader returns nil while this instance holds the leadership, ErrNotLeader
// otherwise, ErrClosed after Close, and the campaign's error when it stopped for
// good (an invalid option: dlock.ErrInvalid). It makes no I/O.
func (e *Elector) IsLeader(context.Context) error {
	e.mu.Lock()
	ld, err := e.cur, e.err
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if ld != nil && ld.Err() == nil {
		return nil
	}
	return ErrNotLeader
}

// Leadership returns the leadership this instance holds, or nil. Its Token
// fences the leader's writes; its Context ends when it is lost.
func (e *Elector) Leadership() *dlock.Leadership {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != nil && e.cur.Err() == nil {
		return e.cur
	}
	return nil
}

// Wait returns when this instance leads, with its leadership, or with ctx's
// error when ctx ends first, or with the campaign's error when it stopped.
func (e *Elector) Wait(ctx context.Context) (*dlock.Leadership, error) {
	for {
		e.mu.Lock()
		ld, err, ch := e.cur, e.err, e.changed
		e.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if ld != nil && ld.Err() == nil {
			return ld, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops campaigning and resigns a leadership held, so that another
// instance can win at once; later IsLeader calls return ErrClosed. It returns
// the error of the resignation (nil when nothing was held). Shut the scheduler
// down first, or a job may start after Close.
func (e *Elector) Close(ctx context.Context) error {
	e.cancel()
	<-e.done
	e.mu.Lock()
	ld := e.cur
	e.mu.Unlock()
	e.set(nil, ErrClosed)
	if ld == nil || ld.Err() != nil {
		return nil
	}
	return ld.Resign(ctx)
}
