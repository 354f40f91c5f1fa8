package natslock

import (
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultSemaphoreBucket names the key-value bucket of a SemaphoreDriver's
// locks when WithBucket is not given.
const DefaultSemaphoreBucket = "dlock_sem"

// MaxPermits is the largest number of permits of a semaphore.
const MaxPermits = 1 << 16

// SemaphoreDriver is the driver.Driver of counting semaphores of n permits
// in a JetStream key-value bucket: the queue of a FairDriver whose first n
// live entries hold, each with its own owner, fencing token (its entry's
// first revision), TTL and loss signal; the others wait in arrival order,
// and a TryLock does not pass them. A release grants the next entry without
// a write. Every entry carries n: a Client made with another n gets an error
// matching dlock.ErrConflict while the key's queue has entries. There is no
// resize. Most users want NewSemaphore.
type SemaphoreDriver struct{ *FairDriver }

// NewSemaphore returns a Client whose locks are counting semaphores of n
// permits (see SemaphoreDriver), in the DefaultSemaphoreBucket of js's
// account, with opts as the defaults of its TryLock and Lock calls. Nothing
// is sent to the server: SemaphoreDriver.Migrate creates the bucket. It
// returns an error matching dlock.ErrInvalid for n outside [1, MaxPermits],
// a nil js or a bad option.
func NewSemaphore(js jetstream.JetStream, n int, opts ...dlock.Option) (*Client, error) {
	s, err := NewSemaphoreDriver(js, n)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(s, opts...)
}

// NewSemaphoreDriver returns the driver of semaphores of n permits over js,
// set up by opts as NewDriver's are, in the DefaultSemaphoreBucket unless
// WithBucket names another. Nothing is sent to the server. It returns an
// error matching dlock.ErrInvalid for n outside [1, MaxPermits], a nil js
// or a bad option.
func NewSemaphoreDriver(js jetstream.JetStream, n int, opts ...Option) (*SemaphoreDriver, error) {
	if n < 1 || n > MaxPermits {
		return nil, fmt.Errorf("%w: natslock: %d permits outside [1, %d]", driver.ErrInvalid, n, MaxPermits)
	}
	f, err := NewFairDriver(js, append([]Option{WithBucket(DefaultSemaphoreBucket)}, opts...)...)
	if err != nil {
		return nil, err
	}
	f.d.permits, f.d.kind = n, driver.KindSemaphore
	return &SemaphoreDriver{f}, nil
}

// Info implements driver.Driver: the semaphore of NATS.
func (s *SemaphoreDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "natslock", Kind: driver.KindSemaphore}
}
