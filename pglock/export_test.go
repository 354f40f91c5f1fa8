package pglock

// SetListenStatement replaces the LISTEN statement of d's listener, so that a
// test can have the server refuse it.
func (d *Driver) SetListenStatement(q string) { d.ln.listen = q }

// ListenerStats returns how many times d's listener connected, how many
// waiters it woke on notifications, and how many subscriptions are open.
func (d *Driver) ListenerStats() (connects, wakes int64, subs int) {
	d.ln.mu.Lock()
	defer d.ln.mu.Unlock()
	return d.ln.connects.Load(), d.ln.wakes.Load(), d.ln.n
}
