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
