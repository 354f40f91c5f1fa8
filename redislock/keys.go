package redislock

import (
	"strconv"
	"strings"
)

// The storage layout: every Redis key and pub/sub channel of a lock named KEY
// starts with Prefix and carries the hash tag {KEY}, so that on Redis Cluster
// all of them live in the lock's slot and every script is single-slot.

// Prefix starts every key dlock writes to Redis.
const Prefix = "dlock:"

// LockKey returns the Redis key of the lock named key.
func LockKey(key string) string { return Prefix + "{" + key + "}" }

// FenceKey returns the Redis key of the fence counter of the lock named key.
func FenceKey(key string) string { return Prefix + "{" + key + "}:fence" }

// ValueKey returns the Redis key of the versioned value named key.
func ValueKey(key string) string { return Prefix + "{" + key + "}:value" }

// resultKey returns the Redis key of the result that dlock.Once stored for
// the lock named key.
func resultKey(key string) string { return Prefix + "{" + key + "}:result" }

// waitingKey returns the Redis key of the processes waiting for the plain lock
// named key: a sorted set of their Clients' ids by arrival, from which each
// release wakes the first.
func waitingKey(key string) string { return Prefix + "{" + key + "}:waiting" }

// abandonKey returns the Redis key that marks owner's acquisition of the lock
// named key as abandoned (see AbandonMarkTTL).
func abandonKey(key, owner string) string { return Prefix + "{" + key + "}:gone:" + owner }

// queueKey returns the Redis key of the fair-lock queue of the lock named key: a
// list of waiting owners in arrival order.
func queueKey(key string) string { return Prefix + "{" + key + "}:queue" }

// queueDeadlineKey returns the Redis key of the deadlines of the fair-lock queue of
// the lock named key: a sorted set of owners scored by the server time in
// milliseconds after which their entry is dropped.
func queueDeadlineKey(key string) string { return Prefix + "{" + key + "}:queue:deadline" }

// holdersKey returns the Redis key of the leases of the semaphore or read-write
// lock named key: a sorted set of owners scored by the server time (ms) at which
// each lease ends.
func holdersKey(key string) string { return Prefix + "{" + key + "}:holders" }

// readersKey returns the Redis key of the readers waiting for the read-write
// lock named key: a sorted set of owners scored by the server time (ms) until
// which each entry lives.
func readersKey(key string) string { return Prefix + "{" + key + "}:readers" }

// waitingOwnersKey returns the Redis key of the owner IDs waiting for the
// reentrant lock named key.
func waitingOwnersKey(key string) string { return Prefix + "{" + key + "}:owners" }

// wakeChannel returns the pub/sub channel on which the waiters of the lock named
// key are woken. It carries the lock's hash tag, so that on Redis Cluster the
// sharded channel lives on the lock's shard.
func wakeChannel(key string) string { return Prefix + "{" + key + "}:wake" }

// clientWakeChannel returns the channel on which a release of the plain lock
// named key wakes the Client (the process) whose id is id, alone: the lock's
// wake channel followed by ":" and the id.
func clientWakeChannel(key, id string) string { return wakeChannel(key) + ":" + id }

// SizeKey returns the Redis key of the size of the semaphore named key, stored
// by Resize: a hash of n (the size in force) and i (the size before the first
// resize). It has no expiry; deleting it returns the semaphore to the size of
// its Clients.
func SizeKey(key string) string { return Prefix + "{" + key + "}:size" }

// semKeys are the keys of the semaphore's scripts: leaseKeys, then its stored
// size.
func semKeys(key, owner string) []string { return append(leaseKeys(key, owner), SizeKey(key)) }

// leaseKeys are the keys of every script of a lock with several holders, in the
// order leases.lua names them.
func leaseKeys(key, owner string) []string {
	return []string{LockKey(key), FenceKey(key), queueKey(key), queueDeadlineKey(key), abandonKey(key, owner), holdersKey(key)}
}

// rwKeys are the keys of the read-write lock's scripts: leaseKeys, then the
// waiting readers (its writers wait in the queue).
func rwKeys(key, owner string) []string {
	return append(leaseKeys(key, owner), readersKey(key))
}

// queueEntryKey returns the Redis key that keeps the fair-lock queue entry
// entry of the lock named key alive: it lives as long as the entry does.
func queueEntryKey(key, entry string) string { return queueKey(key) + ":" + entry }

// fairKeys are the keys of the fair lock's scripts for owner, whose queue entry
// is entry.
func fairKeys(key, owner, entry string) []string {
	return []string{LockKey(key), FenceKey(key), queueKey(key), queueEntryKey(key, entry), abandonKey(key, owner)}
}

func inspectKeys(key string) []string {
	return []string{LockKey(key), FenceKey(key), queueKey(key), waitingKey(key)}
}

// lockRecord is a plain mutex's lock record as parseRecord reads it (see
// lib.lua in internal/redisscript for the format).
type lockRecord struct {
	token    uint64
	owner    string // "" once released
	waited   bool   // a waiter may wait: the release wakes one
	metadata string
}

// parseRecord reads the plain mutex's lock record v: "FT OWNER[ METADATA]"
// while held, "-T" once released, with T the newest token in base 36 and F '+'
// when a waiter may wait, '-' otherwise.
func parseRecord(v string) (lockRecord, bool) {
	var r lockRecord
	switch {
	case strings.HasPrefix(v, "+"):
		r.waited = true
	case !strings.HasPrefix(v, "-"):
		return r, false
	}
	v = v[1:]
	t, rest, held := strings.Cut(v, " ")
	if t == "" || strings.Trim(t, "0123456789abcdefghijklmnopqrstuvwxyz") != "" {
		return r, false
	}
	n, err := strconv.ParseUint(t, 36, 64)
	if err != nil {
		return r, false
	}
	r.token = n
	if !held {
		return r, true
	}
	r.owner, r.metadata, _ = strings.Cut(rest, " ")
	return r, r.owner != ""
}

// rwMarker is the lock hash field that marks a read-write lock.
const rwMarker = "rw"

// semMarker is the lock hash field of a semaphore: its number of permits.
const semMarker = "n"
