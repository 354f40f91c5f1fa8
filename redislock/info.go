package redislock

import "github.com/dlock-go/dlock"

// Info implements dlock.Driver: the plain mutex of Redis.
func (d *Driver) Info() dlock.DriverInfo {
	return dlock.DriverInfo{Backend: "redislock", Kind: dlock.KindMutex}
}

// Info implements dlock.Driver: the fair mutex of Redis.
func (d *FairDriver) Info() dlock.DriverInfo {
	return dlock.DriverInfo{Backend: "redislock", Kind: dlock.KindFair}
}

// Info implements dlock.Driver: the reentrant mutex of Redis.
func (d *ReentrantDriver) Info() dlock.DriverInfo {
	return dlock.DriverInfo{Backend: "redislock", Kind: dlock.KindReentrant}
}

// Info implements dlock.Driver: the read or the write side of a read-write
// lock (dlock.KindRead, dlock.KindWrite).
func (d *RWDriver) Info() dlock.DriverInfo {
	if d.write {
		return dlock.DriverInfo{Backend: "redislock", Kind: dlock.KindWrite}
	}
	return dlock.DriverInfo{Backend: "redislock", Kind: dlock.KindRead}
}

// Info implements dlock.Driver: the counting semaphore of Redis.
func (d *SemaphoreDriver) Info() dlock.DriverInfo {
	return dlock.DriverInfo{Backend: "redislock", Kind: dlock.KindSemaphore}
}
