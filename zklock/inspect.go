package zklock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/go-zookeeper/zk"
)

// LockInfo is what the server holds about one lock, as Inspect and List read
// it. It is a snapshot: the lock may change hands right after.
type LockInfo struct {
	Key      string        // the lock name
	Owner    string        // the holder's owner token
	Metadata string        // the holder's WithMetadata text; may be empty
	Token    uint64        // the holder's fencing token (its node's czxid)
	TTL      time.Duration // time left of the holder's TTL, counted from its last write; <0 unknown
	Waiters  int           // nodes queued behind the holder
}

// Inspect reads the lock named key without changing it. The error matches
// dlock.ErrNotHeld when nobody holds it, dlock.ErrConflict when its node holds
// foreign children, and dlock.ErrUnavailable when the server cannot be reached.
func (d *Driver) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if d == nil {
		return LockInfo{}, fmt.Errorf("%w: nil driver", dlock.ErrInvalid)
	}
	if ctx == nil {
		return LockInfo{}, fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	if err := dlock.ValidateKey(key); err != nil {
		return LockInfo{}, err
	}
	for round := 0; round < maxRounds; round++ {
		lp := d.lockPath(key)
		q, err := d.list(ctx, lp)
		if err != nil {
			return LockInfo{}, err
		}
		if len(q) == 0 {
			return LockInfo{}, fmt.Errorf("%w: %q is free", dlock.ErrNotHeld, key)
		}
		var data []byte
		var st *zk.Stat
		err = d.call(ctx, func() (err error) {
			data, st, err = d.conn.Get(lp + "/" + q[0].name)
			return err
		})
		if isNoNode(err) {
			continue
		}
		if err != nil {
			return LockInfo{}, mapErr(err)
		}
		nd, _ := decodeData(data)
		return LockInfo{Key: key, Owner: q[0].owner, Metadata: nd.Metadata, Token: uint64(st.Czxid),
			TTL: remaining(nd, st.Mtime), Waiters: len(q) - 1}, nil
	}
	return LockInfo{}, fmt.Errorf("%w: zklock: the queue of %q kept changing", dlock.ErrUnavailable, key)
}

// List returns the held locks whose keys match pattern, sorted by key. The
// pattern is a glob: '*' matches any run of characters ('/' included), '?' one
// character, '[abc]' and '[a-z]' one of a set ('[^...]' or '[!...]' negated),
// and '\' quotes the next character.
func (d *Driver) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil driver", dlock.ErrInvalid)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	re, err := globRegexp(pattern)
	if err != nil {
		return nil, err
	}
	var names []string
	err = d.call(ctx, func() (err error) {
		names, _, err = d.conn.Children(d.root)
		return err
	})
	if isNoNode(err) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err)
	}
	sort.Strings(names)
	var out []LockInfo
	for _, n := range names {
		key, ok := unescape(n)
		if !ok || dlock.ValidateKey(key) != nil || !re.MatchString(key) {
			continue
		}
		info, err := d.Inspect(ctx, key)
		if errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// globRegexp compiles a List pattern.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^`)
	rs := []rune(pattern)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(rs) {
				return nil, fmt.Errorf("%w: pattern %q ends with '\\'", dlock.ErrInvalid, pattern)
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '[':
			j := i + 1
			if j < len(rs) && (rs[j] == '^' || rs[j] == '!') {
				j++
			}
			if j < len(rs) && rs[j] == ']' {
				j++
			}
			for j < len(rs) && rs[j] != ']' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("%w: pattern %q has an unclosed '['", dlock.ErrInvalid, pattern)
			}
			set := rs[i+1 : j]
			b.WriteByte('[')
			if len(set) > 0 && (set[0] == '^' || set[0] == '!') {
				b.WriteByte('^')
				set = set[1:]
			}
			for _, c := range set {
				if c == '\\' || c == '[' || c == ']' || c == '^' {
					b.WriteByte('\\')
				}
				b.WriteRune(c)
			}
			b.WriteByte(']')
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("%w: pattern %q: %v", dlock.ErrInvalid, pattern, err)
	}
	return re, nil
}

// ForceUnlock deletes the holder's node of the lock named key, whoever holds it:
// the holder finds out at its next renewal, and the next waiter takes the lock.
// It is for operators clearing a lock whose holder is known to be gone. The
// error matches dlock.ErrNotHeld when the lock is free.
func (d *Driver) ForceUnlock(ctx context.Context, key string) error {
	info, err := d.Inspect(ctx, key)
	if err != nil {
		return err
	}
	lp := d.lockPath(key)
	q, err := d.list(ctx, lp)
	if err != nil {
		return err
	}
	if len(q) == 0 || q[0].owner != info.Owner {
		return nil // released meanwhile
	}
	err = d.call(ctx, func() error { return d.conn.Delete(lp+"/"+q[0].name, -1) })
	if err != nil && !isNoNode(err) {
		return mapErr(err)
	}
	return nil
}
