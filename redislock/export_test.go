package redislock

// The storage layout's key names, for the tests of package redislock_test.
var (
	WaitingKey        = waitingKey
	AbandonKey        = abandonKey
	QueueKey          = queueKey
	QueueDeadlineKey  = queueDeadlineKey
	QueueEntryKey     = queueEntryKey
	HoldersKey        = holdersKey
	ReadersKey        = readersKey
	WakeChannel       = wakeChannel
	ClientWakeChannel = clientWakeChannel
)

// Record is a plain mutex's lock record, as the tests read it.
type Record struct {
	Token    uint64
	Owner    string // "" once released
	Waited   bool
	Metadata string
}

// ParseRecord reads a plain mutex's lock record.
func ParseRecord(v string) (Record, bool) {
	r, ok := parseRecord(v)
	return Record{r.token, r.owner, r.waited, r.metadata}, ok
}

// WatchedHoldings returns how many holdings d watches for pushed losses.
func WatchedHoldings(d *Driver) int {
	return d.c.hub.holds.Len()
}

// LossWatchConfirmed reports whether Client c (of a plain or a fair lock)
// has a loss subscription whose every subscription the server confirmed: its
// first check of the holdings was started then.
func LossWatchConfirmed(c *Client) bool {
	var h *hub
	switch d := c.Driver().(type) {
	case *Driver:
		h = d.c.hub
	case *FairDriver:
		h = d.c.hub
	default:
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loss != nil && h.loss.confirmed >= h.loss.want
}
