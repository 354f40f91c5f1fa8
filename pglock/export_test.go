package pglock

import "time"

// SetListenStatement replaces the LISTEN statement of d's listener, so that a
// test can have the server refuse it.
func (d *Driver) SetListenStatement(q string) { d.ln.listen = q }

// ListenerStats returns how many times d's listener connected, how many
// waiters it woke on notifications, and how many subscriptions are open.
func (d *Driver) ListenerStats() (connects, wakes int64, subs int) {
	d.ln.mu.Lock()
	defer d.ln.mu.Unlock()
	return d.ln.connects.Load(), d.ln.wakes.Load(), d.ln.n - d.ln.nholds - d.ln.nkeep
}

func init() {
	// The tests' listening connections close soon after their last waiter,
	// well within what the leak check at the end waits for.
	listenLinger = 20 * time.Millisecond
}

// SetListenLinger sets how long d's listening connection outlives its last
// waiter.
func (d *Driver) SetListenLinger(t time.Duration) {
	d.ln.mu.Lock()
	defer d.ln.mu.Unlock()
	d.ln.lingerFor = t
}

// StopListener closes d's listening connection now if nobody waits.
func (d *Driver) StopListener() {
	d.ln.mu.Lock()
	r, g := d.ln.cur, d.ln.lingerGen
	d.ln.mu.Unlock()
	if r != nil {
		d.ln.idle(r, g)
	}
}
