package redisscript

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Server error classes, by the first word of the reply. Every reply maps to a
// dlock sentinel: a Lock retries the transient ones within its wait, and fails at
// once on the others.
var (
	// transientPrefixes mean "not now": the server is loading, read-only, out of
	// memory, failing to persist, busy with a script, or its cluster or
	// replication is degraded. A MOVED or ASK redirection reaches dlock only when
	// the client's redirections ran out while a slot changed owner (the nodes
	// disagree for a moment during a resharding or a failover), so it is
	// transient too.
	transientPrefixes = []string{
		"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY",
		"NOREPLICAS", "OOM", "MISCONF", "UNBLOCKED", "MOVED", "ASK",
	}
	// refusedPrefixes mean "no" for a reason waiting does not cure: ACL
	// permissions and authentication.
	refusedPrefixes = []string{"NOPERM", "NOAUTH", "WRONGPASS"}
)

// MapErr turns a go-redis error from a script or command into one matching the
// dlock sentinels: ErrConflict for WRONGTYPE and the scripts' DLOCKCONFLICT
// replies; ErrUnavailable for network errors and the server's "not now" replies
// (READONLY, LOADING, BUSY, OOM, MISCONF, CLUSTERDOWN, a MOVED or ASK left over
// from a slot changing owner...); ErrRefused (which
// matches ErrUnavailable too) for NOPERM, NOAUTH, WRONGPASS and every other server
// reply. Context errors and nil pass through. The text names pkg and the server's
// reply, without the script hash go-redis appends.
func MapErr(pkg string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	msg := rerr.Error()
	word, _, _ := strings.Cut(msg, " ")
	text := replyText(msg)
	switch {
	case word == "WRONGTYPE":
		return fmt.Errorf("%w: the key is not a dlock lock (it holds a Redis value of another type)", dlock.ErrConflict)
	case word == "DLOCKCONFLICT":
		return fmt.Errorf("%w: the key is not a dlock lock (%s)", dlock.ErrConflict, strings.TrimPrefix(text, "DLOCKCONFLICT "))
	case hasWord(word, transientPrefixes):
		return fmt.Errorf("%w: %s: server replied %s", dlock.ErrUnavailable, pkg, text)
	case hasWord(word, refusedPrefixes):
		return fmt.Errorf("%w: %s: server replied %s", dlock.ErrRefused, pkg, text)
	}
	return fmt.Errorf("%w: %s: unexpected server reply %s", dlock.ErrRefused, pkg, text)
}

func hasWord(w string, list []string) bool {
	for _, p := range list {
		if w == p {
			return true
		}
	}
	return false
}

// replyText is a server error reply without the script location go-redis and the
// server add to errors raised inside a script ("script: <sha>, on @user_script:N.").
func replyText(msg string) string {
	if i := strings.Index(msg, " script: "); i >= 0 {
		msg = msg[:i]
	}
	return strings.TrimRight(strings.TrimSpace(msg), ".")
}
