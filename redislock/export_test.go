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
