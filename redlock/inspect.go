package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Inspect implements driver.Inspector: it reads the lock named key on every node
// and returns the majority's view. The lock is held when a majority of the nodes
// hold it for one owner; its TTL is then the time until fewer than a majority
// hold it, and its token the one recorded on the majority (on the most of
// them, when nodes that lost the holding took it anew with tokens of their
// own). LastToken is the
// largest fence counter of any node. A holding on a minority of the nodes (left
// by an acquisition that failed, until its TTL) shows as free, unless the
// nodes that did not answer could make it a majority: then whether it is held
// cannot be told. The error matches dlock.ErrInvalid for a bad key, and
// dlock.ErrUnavailable when fewer than a majority of the nodes answer or the
// answers do not decide.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if ctx == nil {
		return driver.LockInfo{}, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{}, err
	}
	got, err := askNodes(ctx, d.all(), d.nodeTimeout(0), func(ctx context.Context, i int) (driver.LockInfo, error) {
		return d.nodes[i].Inspect(ctx, key)
	}, nil)
	if err != nil {
		return driver.LockInfo{}, err
	}
	var infos []driver.LockInfo
	for _, r := range got {
		if r.err == nil {
			infos = append(infos, r.val)
		}
	}
	if len(infos) < d.quorum {
		return driver.LockInfo{}, d.unanswered(got)
	}
	info, held := d.majority(key, infos)
	if !held {
		if err := d.undecided(key, infos, failed(got), nodeErrors(got, failure)); err != nil {
			return driver.LockInfo{}, err
		}
	}
	return info, nil
}

// undecided is the error of an inspection that found no majority holding key
// among the nodes that answered (infos: nodes that hold nothing may be left
// out) while the silent nodes, which did not answer (failing with cause), could
// make one: an owner held it on too few answering nodes for a majority, but
// enough with the silent ones. It matches dlock.ErrUnavailable: whether the
// lock is held cannot be told. It is nil when the answers decide.
func (d *Driver) undecided(key string, infos []driver.LockInfo, silent int, cause error) error {
	if silent == 0 {
		return nil
	}
	byOwner := map[string]int{}
	most := 0
	for _, in := range infos {
		if in.Held {
			byOwner[in.Owner]++
			most = max(most, byOwner[in.Owner])
		}
	}
	if most == 0 || most+silent < d.quorum {
		return nil
	}
	return fmt.Errorf("%w: redlock: %q is held by one owner on %d nodes, and %d did not answer: whether a majority holds it cannot be told: %w",
		driver.ErrUnavailable, key, most, silent, cause)
}

// unanswered is the error of an inspection that fewer than a majority of the
// nodes answered: the nodes' own error when a majority failed alike (foreign
// data: dlock.ErrConflict), and otherwise one matching dlock.ErrUnavailable.
func (d *Driver) unanswered(got []reply[driver.LockInfo]) error {
	conflicts := 0
	for _, r := range got {
		if errors.Is(r.err, driver.ErrConflict) {
			conflicts++
		}
	}
	if conflicts >= d.quorum {
		return fmt.Errorf("%w: redlock: on %d of %d nodes: %w", driver.ErrConflict, conflicts, len(d.nodes), nodeErrors(got, nil))
	}
	return fmt.Errorf("%w: redlock: %d of %d nodes answered, %d needed: %w",
		driver.ErrUnavailable, count(got), len(d.nodes), d.quorum, nodeErrors(got, failure))
}

// majority merges what the nodes hold about key (held or not; nodes that hold
// nothing may be left out) into the majority's view, and reports whether a
// majority holds it.
func (d *Driver) majority(key string, infos []driver.LockInfo) (driver.LockInfo, bool) {
	// Waiters wait in their own processes, unseen by the masters.
	out := driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown}
	byOwner := map[string][]driver.LockInfo{}
	for _, in := range infos {
		out.LastToken = max(out.LastToken, in.LastToken)
		if in.Held {
			byOwner[in.Owner] = append(byOwner[in.Owner], in)
		}
	}
	for owner, held := range byOwner {
		if len(held) < d.quorum {
			continue
		}
		ttls := make([]time.Duration, len(held))
		tokens := map[uint64]int{}
		for i, h := range held {
			ttls[i] = h.TTL
			tokens[h.Token]++
		}
		// The token handed out is recorded on a majority; a node that lost
		// the holding (a crash) and took it anew at a renewal drew its own,
		// greater one. When crashes left the token handed out on fewer than
		// a majority, it is still the one on the most nodes (the greatest
		// of those on as many).
		most := 0
		for tok, n := range tokens {
			if n > most || n == most && tok > out.Token {
				out.Token, most = tok, n
			}
		}
		slices.Sort(ttls)
		out.Held, out.Owner, out.Metadata = true, owner, held[0].Metadata
		out.TTL = ttls[len(ttls)-d.quorum]
		out.LastToken = max(out.LastToken, out.Token)
		return out, true
	}
	return out, false
}

// ListPrefix implements driver.Inspector: the locks whose names start with
// prefix that a majority of the nodes hold, in the majority's view (see
// Inspect). The error matches dlock.ErrUnavailable when fewer than a majority of the nodes
// answer, or when the nodes that did not answer could make a majority of a
// holding found on a minority.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	got, err := askNodes(ctx, d.all(), d.nodeTimeout(0), func(ctx context.Context, i int) ([]driver.LockInfo, error) {
		return d.nodes[i].ListPrefix(ctx, prefix)
	}, nil)
	if err != nil {
		return nil, err
	}
	if n := count(got); n < d.quorum {
		return nil, fmt.Errorf("%w: redlock: %d of %d nodes answered, %d needed: %w",
			driver.ErrUnavailable, n, len(d.nodes), d.quorum, nodeErrors(got, failure))
	}
	byKey := map[string][]driver.LockInfo{}
	for _, r := range got {
		for _, in := range r.val {
			byKey[in.Key] = append(byKey[in.Key], in)
		}
	}
	var out []driver.LockInfo
	for key, infos := range byKey {
		if info, held := d.majority(key, infos); held {
			out = append(out, info)
		} else if err := d.undecided(key, infos, failed(got), nodeErrors(got, failure)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ForceUnlock implements driver.Inspector: it removes the lock named key on every
// node, whoever holds it there, and returns the majority's view of what it
// removed. The fence counters are kept, so tokens keep increasing. The holder
// is told as each node's removal is published, and at its next renewal at the
// latest. The error matches dlock.ErrNotHeld when no majority held the lock
// (holdings on a minority of the nodes are removed all the same; the error
// names the nodes that held it), and otherwise as for Inspect: when the nodes
// that did not answer could have made a majority, it matches
// dlock.ErrUnavailable, after the holdings on the nodes that answered were
// removed.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	if ctx == nil {
		return driver.LockInfo{}, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{}, err
	}
	got, err := askNodes(ctx, d.all(), d.nodeTimeout(0), func(ctx context.Context, i int) (driver.LockInfo, error) {
		info, err := d.nodes[i].ForceUnlock(ctx, key)
		if errors.Is(err, driver.ErrNotHeld) {
			return driver.LockInfo{Key: key}, nil // free on this node
		}
		return info, err
	}, nil)
	if err != nil {
		return driver.LockInfo{}, err
	}
	var infos []driver.LockInfo
	removed := 0
	for _, r := range got {
		if r.err == nil {
			infos = append(infos, r.val)
			if r.val.Held {
				removed++
			}
		}
	}
	if len(infos) < d.quorum {
		return driver.LockInfo{}, d.unanswered(got)
	}
	info, held := d.majority(key, infos)
	if !held {
		if err := d.undecided(key, infos, failed(got), nodeErrors(got, failure)); err != nil {
			return driver.LockInfo{}, fmt.Errorf("%w (the holdings on the nodes that answered removed)", err)
		}
		return info, fmt.Errorf("%w: %q is not held by a majority of the nodes (%d partial holdings removed%s)", driver.ErrNotHeld, key, removed, heldOn(got))
	}
	return info, nil
}

// failed returns how many nodes failed to answer (see failure): a node that
// answered with an error of its own (foreign data) holds no lock.
func failed[T any](got []reply[T]) int {
	n := 0
	for _, r := range got {
		if r.err != nil && failure(r.err) {
			n++
		}
	}
	return n
}

// heldOn describes which nodes held a lock, for an error: ": on nodes 0, 3".
func heldOn(got []reply[driver.LockInfo]) string {
	var on []string
	for _, r := range got {
		if r.err == nil && r.val.Held {
			on = append(on, strconv.Itoa(r.node))
		}
	}
	if len(on) == 0 {
		return ""
	}
	return ": on nodes " + strings.Join(on, ", ")
}
