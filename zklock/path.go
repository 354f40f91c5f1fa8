package zklock

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"
)

// childPrefix starts the name of every lock node; seqDigits is the width of the
// sequence number ZooKeeper appends to a sequential node's name.
const (
	childPrefix = "lock-"
	seqDigits   = 10
)

// escape turns a lock key into one znode path component that ZooKeeper accepts
// and that unescape turns back: '%', '/', and every byte outside printable ASCII
// become %XX, and so does the '.' of a key made of dots only ("." and ".." are
// not allowed as components).
func escape(key string) string {
	dots := strings.Trim(key, ".") == ""
	if !dots && !needsEscape(key) {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '%' || c == '/' || c < 0x21 || c > 0x7e || (dots && c == '.') {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// needsEscape reports whether key has a byte escape turns into %XX (the
// dots-only rule aside).
func needsEscape(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c == '%' || c == '/' || c < 0x21 || c > 0x7e {
			return true
		}
	}
	return false
}

// unescape reverses escape; ok is false for a name escape cannot have made.
func unescape(name string) (key string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b.WriteByte(name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	key = b.String()
	return key, escape(key) == name
}

// lockPath is the znode of the lock named key.
func (d *Driver) lockPath(key string) string {
	if d.root == "/" {
		return "/" + escape(key)
	}
	return d.root + "/" + escape(key)
}

// checkOwner rejects owner tokens that cannot be part of a node name.
func checkOwner(owner string) error {
	if owner == "" || strings.ContainsAny(owner, "/%") || escape(owner) != owner {
		return fmt.Errorf("%w: owner %q cannot be part of a znode name", driver.ErrInvalid, owner)
	}
	return nil
}

// child is one lock node, parsed from its name.
type child struct {
	name  string
	owner string
	seq   int64
}

// parseChild parses lock-<owner>-<sequence>; ok is false for any other name.
func parseChild(name string) (child, bool) {
	rest, ok := strings.CutPrefix(name, childPrefix)
	if !ok || len(rest) < seqDigits+2 || rest[len(rest)-seqDigits-1] != '-' {
		return child{}, false
	}
	seq, err := strconv.ParseInt(rest[len(rest)-seqDigits:], 10, 64)
	if err != nil || seq < 0 {
		return child{}, false
	}
	return child{name: name, owner: rest[:len(rest)-seqDigits-1], seq: seq}, true
}

// queue parses and sorts a lock node's children: the holder first; marked
// reports the lock-delay marker (delayChild), which is no lock node. It fails
// with dlock.ErrConflict on a child that is not a lock node.
func queue(lockPath string, names []string) (q []child, marked bool, err error) {
	q = make([]child, 0, len(names))
	for _, n := range names {
		if n == delayChild {
			marked = true
			continue
		}
		c, ok := parseChild(n)
		if !ok {
			return nil, false, fmt.Errorf("%w: %s has child %q, which is not a dlock lock node", driver.ErrConflict, lockPath, n)
		}
		q = append(q, c)
	}
	// The sequence is a signed 32-bit counter that can wrap; a lock's queue is
	// short-lived, so sorting by value is right until 2^31 nodes have been made
	// under one lock node without its removal.
	sort.Slice(q, func(i, j int) bool { return q[i].seq < q[j].seq })
	return q, marked, nil
}

// find returns the index of owner's first node in q, or -1.
func find(q []child, owner string) int {
	for i, c := range q {
		if c.owner == owner {
			return i
		}
	}
	return -1
}
