package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/redis/go-redis/v9"
)

// unidentified is the identity of a node whose server would not say what it is
// (INFO refused by an ACL, or no run_id in its reply): it is never compared.
const unidentified = "?"

// identities is what each node's server said it is at first contact: its
// run_id, which a Redis server draws at start-up. Two nodes with the same run_id
// are one server under two names (127.0.0.1:P and localhost:P, an IP and a host
// name, two Sentinel clients for one master): counted twice, they would make a
// majority out of one server.
type identities struct {
	mu    sync.Mutex
	ids   []string // by node; "" until the node has answered
	dup   error    // set for good once two nodes turned out to be one server
	round bool     // every node has been asked once (answered or not)
}

// identifyAll asks every node not identified yet what server it is, in
// parallel, each bounded by timeout, and waits for all of them: the first
// acquisition compares all the nodes that answer before any of them takes
// part. A node that did not answer is asked again by later acquisitions, before
// their request on it.
func (d *Driver) identifyAll(ctx context.Context, timeout time.Duration) error {
	d.ident.mu.Lock()
	done := d.ident.round
	d.ident.mu.Unlock()
	if done {
		return d.duplicate()
	}
	_, err := askNodes(ctx, d.all(), timeout, func(ctx context.Context, i int) (struct{}, error) {
		return struct{}{}, d.identify(ctx, i)
	}, nil)
	if err != nil {
		return err
	}
	d.ident.mu.Lock()
	d.ident.round = true
	d.ident.mu.Unlock()
	return d.duplicate()
}

// identify learns, at node i's first contact, which server it is, and returns an
// error matching dlock.ErrInvalid, naming both nodes, once two nodes are known to
// be the same server. A node is identified once: a server that restarts later
// draws a new run_id, but the comparison was made when the nodes were first
// reached (normally by the same acquisition attempt, which goes to every node).
func (d *Driver) identify(ctx context.Context, i int) error {
	id := &d.ident
	id.mu.Lock()
	dup, known := id.dup, id.ids[i] != ""
	id.mu.Unlock()
	if dup != nil || known {
		return dup
	}
	info, err := d.rdbs[i].Info(ctx, "server").Result()
	runID := unidentified
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		// The server answered but will not tell (an ACL without INFO): it
		// cannot be compared, and the acquisition goes on without.
	case err != nil:
		return mapErr(err)
	default:
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok && v != "" {
				runID = v
			}
		}
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dup == nil && runID != unidentified {
		for j, other := range id.ids {
			if j != i && other == runID {
				a, b := min(i, j), max(i, j)
				id.dup = fmt.Errorf("%w: redlock: nodes %d (%s) and %d (%s) are the same Redis server (run_id %s): a majority must be of independent servers",
					driver.ErrInvalid, a, d.nodeName(a), b, d.nodeName(b), runID)
				break
			}
		}
	}
	if id.ids[i] == "" {
		id.ids[i] = runID
	}
	return id.dup
}

// duplicate returns the error of two nodes found to be one server, or nil.
func (d *Driver) duplicate() error {
	d.ident.mu.Lock()
	defer d.ident.mu.Unlock()
	return d.ident.dup
}

// nodeName is node i's address as its client was given it.
func (d *Driver) nodeName(i int) string {
	if c, ok := d.rdbs[i].(*redis.Client); ok {
		if o := c.Options(); o.Addr != "FailoverClient" {
			return o.Addr
		}
		return "a Sentinel master"
	}
	return fmt.Sprintf("%T", d.rdbs[i])
}

// refuseDuplicate ends an acquisition attempt that found two nodes to be one
// server: whatever it took on any node is abandoned (also an attempt still on
// its way cannot land), and the error says which nodes they are.
func (d *Driver) refuseDuplicate(ctx context.Context, r driver.AcquireRequest, dup error) error {
	cctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	_ = d.Abandon(cctx, driver.Holding{Key: r.Key, Owner: r.Owner, TTL: r.TTL})
	return dup
}
