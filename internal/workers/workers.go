// Package workers runs short calls on goroutines that wait a while for the next
// call: a goroutine that made a call through a client library's deep call path
// (go-redis, go-zookeeper) has grown its stack, and under load the next call
// runs on that stack instead of growing a new goroutine's anew.
package workers

import "time"

// idle is how long a worker waits for its next call before it ends.
const idle = 20 * time.Millisecond

// jobs hands a call to a worker waiting for one.
var jobs = make(chan func())

// Go calls f on a goroutine other than the caller's: a worker waiting for a
// call, or a new one when none waits. Like a go statement, it does not wait
// for f.
func Go(f func()) {
	select {
	case jobs <- f:
	default:
		go work(f)
	}
}

// work is a worker: it calls f, then each call handed to it, until none came
// for idle.
func work(f func()) {
	f()
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case f := <-jobs:
			f()
			t.Reset(idle)
		case <-t.C:
			return
		}
	}
}
