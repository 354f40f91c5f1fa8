// Package verifyhooks holds switches that break the library on purpose, for
// the broken variants of the verification suite (module verify): a variant's
// worker process turns one on before it makes its Client, and the suite checks
// that its checkers catch the breakage. Nothing else sets them; they are off.
package verifyhooks

import "sync/atomic"

// NoSubscribeCheck stops redislock's Clients from checking their holdings when
// their loss subscription is established (at first, and again after it
// dropped): a force-unlock that came before is then left to the holder's
// renewal (the nosubcheck variant).
var NoSubscribeCheck atomic.Bool
