// Package heard remembers, for a while, the locks that a loss message named
// while the process held none of them: a holding whose acquisition was sent
// before such a message may have been forced between its grant and its
// registration, and is checked when it registers. Redis's and PostgreSQL's
// loss paths use it.
package heard

import "time"

// For is how long a message is remembered: longer than an acquisition's
// round trip.
const For = 10 * time.Second

// max bounds the messages remembered.
const max = 1024

// Set is the locks heard of. The zero Set is empty and ready; it is not safe
// for concurrent use (its owner's lock guards it).
type Set struct {
	at map[string]time.Time
}

// Add remembers that a message named key now. A flood of messages beyond
// what can be remembered is forgotten.
func (s *Set) Add(key string) {
	now := time.Now()
	if len(s.at) >= max {
		for k, at := range s.at {
			if now.Sub(at) > For {
				delete(s.at, k)
			}
		}
		if len(s.at) >= max {
			clear(s.at)
		}
	}
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[key] = now
}

// Since reports whether a message named key at t or later.
func (s *Set) Since(key string, t time.Time) bool {
	at, ok := s.at[key]
	return ok && !at.Before(t)
}
