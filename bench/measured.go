package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// measured is a variant opened on a fresh go-redis client whose commands are
// counted.
type measured struct {
	e   *env
	v   variant
	rdb *redis.Client
	cnt *cmdCounter
	lk  locker
}

func (e *env) openMeasured(v variant, name string) (*measured, error) {
	rdb, cnt := e.newClient(name)
	m := &measured{e: e, v: v, rdb: rdb, cnt: cnt}
	lk, err := v.open(m.opening())
	if err != nil {
		rdb.Close()
		return nil, err
	}
	m.lk = lk
	return m, nil
}

// opening is what the variant's lockers are opened on: the measured client and
// counter.
func (m *measured) opening() opening { return opening{e: m.e, rdb: m.rdb, cnt: m.cnt} }

func (m *measured) close() {
	closeLocker(m.lk)
	m.rdb.Close()
}

// reading is a point in time of the command counters, or the difference of two.
type reading struct {
	at       time.Time
	d        time.Duration // between the two readings of a difference
	client   int64         // lock commands of the measured client
	work     int64         // critical-section commands of the measured client
	server   int64         // requests of the lock server, work included when it is Redis
	channels int64         // subscribed pub/sub channels
}

func (m *measured) read(ctx context.Context) (reading, error) {
	s, err := m.e.requests(ctx, m.v.on)
	if err != nil {
		return reading{}, err
	}
	if m.v.on != onRedis {
		// The critical section's work goes to Redis: lockServer takes out
		// nothing.
		s += m.cnt.work.Load()
	}
	c, err := channels(ctx, m.e.admin)
	return reading{at: time.Now(), client: m.cnt.lock.Load(), work: m.cnt.work.Load(), server: s, channels: c}, err
}

// since returns the counts from r0 to r.
func (r reading) since(r0 reading) reading {
	return reading{at: r.at, d: r.at.Sub(r0.at), client: r.client - r0.client, work: r.work - r0.work,
		server: r.server - r0.server, channels: r.channels}
}

// usedSince returns the counts from r0 to now, or the context's error if it ended.
func (m *measured) usedSince(ctx context.Context, r0 reading) (reading, error) {
	if err := ctx.Err(); err != nil {
		return reading{}, err
	}
	r1, err := m.read(ctx)
	return r1.since(r0), err
}

// lockServer is the lock server's count of lock requests (work taken out).
func (r reading) lockServer() int64 { return r.server - r.work }
