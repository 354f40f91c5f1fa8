package dashboard

import (
	"time"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultHistory  = 5 * time.Minute
	MinInterval     = 100 * time.Millisecond

	// historyPoints is how many buckets a history holds (History/historyPoints each).
	historyPoints = 60
	// keepFree is how long a lock stays in the view after it was last seen held.
	keepFree = time.Minute
)

// Options configure a Watcher and a Handler. The zero value watches every lock
// ("*") every second, keeps five minutes of history and refuses force-unlock.
type Options struct {
	// Pattern selects the locks by name (a glob as dlock.MatchKey reads it);
	// "" means "*".
	Pattern string

	// Interval is the time between two reads of the locks: DefaultInterval when
	// zero, at least MinInterval.
	Interval time.Duration

	// History is how far back the plots reach: DefaultHistory when zero.
	History time.Duration

	// AllowUnlock lets the Handler force-unlock a lock, on a POST that names the
	// lock and the owner the operator confirmed. Off by default: the page is
	// read-only.
	AllowUnlock bool

	// Title names what is watched on the page ("Redis at 127.0.0.1:6379");
	// may be empty.
	Title string

	// DelayedKind names the kind of a lock in its lock-delay, which backends
	// report with no kind (nothing holds it): the kind of the backend's plain
	// lock, which alone keeps a delay (driver.KindMutex on Redis and
	// PostgreSQL, driver.KindFair on etcd and ZooKeeper). Empty: "lock".
	DelayedKind string

	// Audit, when set, is called after every force-unlock the Handler made,
	// with the lock as it was removed and the address of the client that asked.
	Audit func(removed Row, remoteAddr string)
}
