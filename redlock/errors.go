package redlock

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisscript"
)

// errNoAnswer is the error of a node that did not answer within its timeout.
func errNoAnswer(timeout time.Duration) error { return &noAnswer{timeout} }

// noAnswer is a node that did not answer within its timeout: its request may
// still land. It matches dlock.ErrUnavailable.
type noAnswer struct{ timeout time.Duration }

func (e *noAnswer) Error() string {
	return fmt.Sprintf("%v: no answer within %v", driver.ErrUnavailable, e.timeout)
}

// Is makes a noAnswer match dlock.ErrUnavailable.
func (e *noAnswer) Is(target error) bool { return target == driver.ErrUnavailable }

// silent reports whether err is a node that did not answer in time.
func silent(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(*noAnswer); ok {
		return true
	}
	var na *noAnswer
	return errors.As(err, &na)
}

// nodeErrors joins the errors of the replies, each naming its node. Those for
// which keep is false (nil keeps all) are kept as text only, so that a node's
// answer that did not decide the outcome (a busy node in a request that failed
// for want of answers) does not make the whole error match its sentinel.
func nodeErrors[T any](got []reply[T], keep func(error) bool) error {
	var errs []error
	for _, r := range got {
		if r.err == nil {
			continue
		}
		err := flatten(r.err)
		if keep != nil && !keep(r.err) {
			err = errors.New(r.err.Error())
		}
		errs = append(errs, &NodeError{Node: r.node, Err: err})
	}
	return errors.Join(errs...)
}

// failure reports whether err is a node that failed to answer or said "not
// now", as opposed to one that answered no (busy, not held, foreign data,
// refused).
func failure(err error) bool {
	return errors.Is(err, driver.ErrUnavailable) && !errors.Is(err, driver.ErrRefused)
}

// flatten keeps the text of a node's failure to connect but not its type: the
// request as a whole did reach the other nodes, and must not read as never sent
// (which would spare it the clean-up of a give-up).
func flatten(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &unreachable{msg: err.Error()}
	}
	return err
}

// unreachable is a node's failure to connect, as text; it matches
// dlock.ErrUnavailable.
type unreachable struct{ msg string }

func (e *unreachable) Error() string { return e.msg }

// Is makes an unreachable match dlock.ErrUnavailable.
func (e *unreachable) Is(target error) bool { return target == driver.ErrUnavailable }

// NodeError is the failure of one node within a Redlock request; errors returned
// by the driver join one per failed node (errors.As finds the first).
type NodeError struct {
	Node int // the node's index in the list given to NewDriver
	Err  error
}

// Error names the node and its error.
func (e *NodeError) Error() string { return fmt.Sprintf("node %d: %v", e.Node, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// noQuorum is the error of a request about a holding that fewer than a majority
// of nodes carried out: dlock.ErrNotHeld when a majority can no longer hold it,
// and otherwise an error matching dlock.ErrUnavailable.
func (d *Driver) noQuorum(what string, got []reply[time.Duration]) error {
	gone := 0
	for _, r := range got {
		if errors.Is(r.err, driver.ErrNotHeld) || errors.Is(r.err, driver.ErrConflict) {
			gone++
		}
	}
	if gone > len(d.nodes)-d.quorum {
		return fmt.Errorf("%w: redlock: %d of %d nodes no longer hold the lock: %w", driver.ErrNotHeld, gone, len(d.nodes), nodeErrors(got, nil))
	}
	return fmt.Errorf("%w: redlock: %s by %d of %d nodes, %d needed: %w",
		driver.ErrUnavailable, what, count(got), len(d.nodes), d.quorum, nodeErrors(got, failure))
}

// mapErr turns a go-redis error into one matching the dlock sentinels.
func mapErr(err error) error { return redisscript.MapErr("redlock", err) }
