// Package dlockgocron runs go-co-op/gocron v2 schedulers on several instances
// of a service with dlock deciding which instance runs what, on any dlock
// backend (Redis, etcd, ZooKeeper, the in-memory store in tests).
//
// Two ways, as gocron offers them:
//
//   - Locker (gocron.WithDistributedLocker): every run of a job takes the job's
//     lock with one TryLock; the instance that gets it runs the job, the others
//     skip that run. The lease is renewed while the job runs and released at its
//     end, or kept until the min-hold (WithMinHold) has passed, so that an
//     instance whose clock runs a little behind does not run a fast job a second
//     time for the same tick.
//   - Elector (gocron.WithDistributedElector): the instances campaign for one
//     role in the background; the leader runs every job, the others none. When
//     the leader dies its role expires after the campaign's TTL and another
//     instance takes over.
//
// What neither can do: gocron cannot stop a job, so a job whose lease (or
// leadership) is lost while it runs goes on unless it watches a context that
// ends with the lease: wrap it with Locker.Guard, or run it under
// Elector.Leadership().Context(). A job that takes no context cannot be stopped
// on loss, and a write that must never be made by two instances should carry the
// lease's fencing token (Lease.Token) to the store it changes. The Locker cannot
// align ticks across instances: each scheduler fires on its own clock, and the
// min-hold only covers a splay shorter than itself. With the Elector, a tick
// that falls inside a change of leader can run on both the old and the new
// leader when their clocks differ (the old one fired before losing, the new one
// fires after winning).
package dlockgocron
