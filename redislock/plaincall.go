package redislock

import (
	"strings"
	"sync"
)

// The plain lock's lock and unlock run on the hot path of every user, and
// allocate little beyond go-redis's command and reply: the command line of a
// script call lives in a plainCall taken from a pool, its strings are passed
// as pointers into it (go-redis writes a *string as it does a string), and the
// keys of a call are cut from one string.

// plainCall is the command line of one call of the plain lock's scripts and
// the values it points to.
type plainCall struct {
	argv [18]any
	s    [8]string
	n    [2]int64
}

var plainCalls = sync.Pool{New: func() any { return new(plainCall) }}

func getCall() *plainCall { return plainCalls.Get().(*plainCall) }

// put returns c to the pool, its command line cleared so that the pool keeps
// nothing of the caller's alive.
func (c *plainCall) put() {
	c.argv = [len(c.argv)]any{}
	c.s = [len(c.s)]string{}
	plainCalls.Put(c)
}

// str stores v in the i-th string of c and returns it for the command line:
// a pointer, which boxing does not copy to the heap, or v itself when it is
// empty (which boxing does not copy either).
func (c *plainCall) str(i int, v string) any {
	if v == "" {
		return ""
	}
	c.s[i] = v
	return &c.s[i]
}

// int stores v as c's i-th integer and returns it for the command line.
func (c *plainCall) int(i int, v int64) any {
	c.n[i] = v
	return &c.n[i]
}

// waitingSuffix ends the key of the waiting set of a plain lock (see
// waitingKey); the lock key is what comes before it.
const waitingSuffix = ":waiting"

// plainKeys returns, cut from one string, the keys of an acquisition of the
// plain lock named key by owner: its lock key, the key of its waiting set,
// which starts with the lock key, its fence counter and owner's abandon mark.
func plainKeys(key, owner string) (lock, waiting, fence, abandon string) {
	const fenceSuffix, goneInfix = ":fence", ":gone:"
	n := len(Prefix) + len(key) + 2 // the lock key
	var b strings.Builder
	b.Grow(3*n + len(waitingSuffix) + len(fenceSuffix) + len(goneInfix) + len(owner))
	b.WriteString(Prefix)
	b.WriteByte('{')
	b.WriteString(key)
	b.WriteByte('}')
	b.WriteString(waitingSuffix)
	b.WriteString(Prefix)
	b.WriteByte('{')
	b.WriteString(key)
	b.WriteByte('}')
	b.WriteString(fenceSuffix)
	b.WriteString(Prefix)
	b.WriteByte('{')
	b.WriteString(key)
	b.WriteByte('}')
	b.WriteString(goneInfix)
	b.WriteString(owner)
	s := b.String()
	w := n + len(waitingSuffix)
	f := w + n + len(fenceSuffix)
	return s[:n], s[:w], s[w:f], s[f:]
}

// plainHolding is the Handle of a holding of the plain lock: its token and
// its waiting set's key, which starts with its lock key, so that its release
// builds no key.
type plainHolding struct {
	token   uint64
	waiting string
}

// releaseKeys returns the lock key and the waiting set's key of the holding
// of the plain lock named key that p describes, when p describes one of that
// lock.
func (p *plainHolding) releaseKeys(key string) (lock, waiting string, ok bool) {
	n := len(p.waiting) - len(waitingSuffix)
	if n != len(Prefix)+len(key)+2 || p.waiting[len(Prefix)+1:n-1] != key {
		return "", "", false
	}
	return p.waiting[:n], p.waiting, true
}
