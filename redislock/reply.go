package redislock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// The decoding of the scripts' replies into grants, durations, LockInfo and
// errors matching the dlock sentinels.

// acquireReply decodes the {1, token}, {0, pttl} or {2, 0} reply of an acquire
// script.
func acquireReply(res []any, err error, ttl time.Duration) (driver.Grant, error) {
	if err != nil {
		return driver.Grant{}, mapErr(err)
	}
	if len(res) != 2 {
		return driver.Grant{}, fmt.Errorf("%w: redislock: unexpected acquire reply %v", driver.ErrRefused, res)
	}
	ok, _ := res[0].(int64)
	v, _ := res[1].(int64)
	switch ok {
	case 1:
	case 2:
		return driver.Grant{}, fmt.Errorf("%w: the acquisition was abandoned", driver.ErrNotObtained)
	default:
		rem := time.Duration(v) * time.Millisecond
		if v < 0 {
			rem = -1
		}
		return driver.Grant{}, &driver.Taken{Remaining: rem}
	}
	if v <= 0 {
		return driver.Grant{}, fmt.Errorf("%w: redislock: invalid fencing token %d", driver.ErrRefused, v)
	}
	return driver.Grant{Token: uint64(v), TTL: ttl}, nil
}

// extendReply decodes the reply of an extend script: 1 extended, 0 not held.
func extendReply(key string, n int64, err error, ttl time.Duration) (time.Duration, error) {
	if err != nil {
		return 0, mapErr(err)
	}
	if n != 1 {
		return 0, notHeld(key)
	}
	return ttl, nil
}

// ttlReply decodes the reply of a TTL script: the PTTL, or -2 when not held.
func ttlReply(key string, n int64, err error) (time.Duration, error) {
	if err != nil {
		return 0, mapErr(err)
	}
	if n == -2 {
		return 0, notHeld(key)
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: redislock: lock %q has no expiry (PTTL %d)", driver.ErrConflict, key, n)
	}
	return time.Duration(n) * time.Millisecond, nil
}

func notHeld(key string) error {
	return fmt.Errorf("%w: %q is not held by this owner", driver.ErrNotHeld, key)
}

// mapErr turns a go-redis error into one matching the dlock sentinels.
func mapErr(err error) error { return redisscript.MapErr("redislock", err) }

// inspectReply decodes the reply of inspect.lua for key.
func inspectReply(key string, res []any, err error) (LockInfo, error) {
	if err != nil {
		return LockInfo{}, mapErr(err)
	}
	if len(res) != 8 {
		return LockInfo{}, fmt.Errorf("%w: redislock: unexpected inspect reply %v", driver.ErrRefused, res)
	}
	info := LockInfo{Key: key}
	if res[6] == int64(1) {
		info.Kind = driver.KindMutex // a plain lock's record: its waiters are no fair queue
	}
	info.LastToken = replyUint(res[4])
	info.Waiters = int(replyUint(res[5]))
	pttl, _ := res[3].(int64)
	owner, _ := res[0].(string)
	if left, _ := res[7].(int64); left > 0 {
		info.DelayLeft = time.Duration(left) * time.Millisecond
	}
	if owner == "" || pttl == -2 {
		return info, nil
	}
	info.Held, info.Owner, info.Holders, info.Limit = true, owner, 1, 1
	info.Token = replyUint(res[1])
	info.Metadata, _ = res[2].(string)
	if pttl > 0 {
		info.TTL = time.Duration(pttl) * time.Millisecond
	}
	return info, nil
}

func replyUint(v any) uint64 {
	switch v := v.(type) {
	case string:
		n, _ := strconv.ParseUint(v, 10, 64)
		return n
	case int64:
		if v > 0 {
			return uint64(v)
		}
	}
	return 0
}

// leaseReply decodes the reply of leaseinspect.lua for key, of a semaphore when
// sem is true and of a read-write lock otherwise.
func leaseReply(key string, res []any, err error, sem bool) (LockInfo, error) {
	if err != nil {
		return LockInfo{}, mapErr(err)
	}
	if len(res) != 9 {
		return LockInfo{}, fmt.Errorf("%w: redislock: unexpected inspect reply %v", driver.ErrRefused, res)
	}
	info := LockInfo{Key: key, LastToken: replyUint(res[6]), Waiters: int(replyUint(res[7]))}
	holders, _ := res[1].(int64)
	owner, _ := res[2].(string)
	if holders <= 0 || owner == "" {
		return info, nil
	}
	info.Held, info.Owner, info.Holders = true, owner, int(holders)
	info.Token = replyUint(res[3])
	info.Metadata, _ = res[4].(string)
	if pttl, _ := res[5].(int64); pttl > 0 {
		info.TTL = time.Duration(pttl) * time.Millisecond
	}
	switch {
	case sem:
		info.Limit = int(replyUint(res[0]))
	case res[8] == int64(1):
		info.Limit = 1 // a writer holds it
	}
	return info, nil
}

// limitReply reports whether err is the acquire script's DLOCKLIMIT reply, and
// the number of permits it names.
func limitReply(err error) (string, bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return "", false
	}
	word, rest, _ := strings.Cut(rerr.Error(), " ")
	if word != "DLOCKLIMIT" {
		return "", false
	}
	n, _, _ := strings.Cut(rest, " ")
	return n, true
}
