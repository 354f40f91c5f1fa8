package driver

import "time"

// heardFor is how long a Heard surely remembers a message: longer than an
// acquisition's round trip.
const heardFor = 10 * time.Second

// heardMax bounds the messages a Heard remembers.
const heardMax = 1024

// Heard remembers, for a while (ten seconds at least), the locks that a loss message (a message or
// a notification the store pushes when a holding is forced) named while the
// process held none of them, for a driver that tells its holders of such
// messages through a LossSignal: a holding whose acquisition was sent before
// such a message may have been forced between its grant and its registration
// in the driver, and the driver checks it with the store when it registers
// (Since reports whether it must).
//
// The zero Heard is empty and ready; it is not safe for concurrent use (the
// lock that guards the driver's record of its holdings guards it too).
type Heard struct {
	at map[string]time.Time
}

// Add remembers that a message named key now. A flood of messages beyond
// what can be remembered (a thousand within ten seconds) is forgotten.
func (s *Heard) Add(key string) {
	now := time.Now()
	if len(s.at) >= heardMax {
		for k, at := range s.at {
			if now.Sub(at) > heardFor {
				delete(s.at, k)
			}
		}
		if len(s.at) >= heardMax {
			clear(s.at)
		}
	}
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[key] = now
}

// Since reports whether a message named key at t or later.
func (s *Heard) Since(key string, t time.Time) bool {
	at, ok := s.at[key]
	return ok && !at.Before(t)
}
