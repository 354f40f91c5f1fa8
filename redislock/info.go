package redislock

import "github.com/dlock-go/dlock/driver"

// Info implements driver.Driver: the plain mutex of Redis.
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "redislock", Kind: driver.KindMutex}
}

// Info implements driver.Driver: the fair mutex of Redis.
func (d *FairDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "redislock", Kind: driver.KindFair}
}

// Info implements driver.Driver: the reentrant mutex of Redis.
func (d *ReentrantDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "redislock", Kind: driver.KindReentrant}
}

// Info implements driver.Driver: the read or the write side of a read-write
// lock (driver.KindRead, driver.KindWrite).
func (d *RWDriver) Info() driver.DriverInfo {
	if d.write {
		return driver.DriverInfo{Backend: "redislock", Kind: driver.KindWrite}
	}
	return driver.DriverInfo{Backend: "redislock", Kind: driver.KindRead}
}

// Info implements driver.Driver: the counting semaphore of Redis.
func (d *SemaphoreDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "redislock", Kind: driver.KindSemaphore}
}
