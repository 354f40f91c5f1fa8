package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisscript"
)

var (
	_ driver.Resumer = (*Driver)(nil)
	_ driver.Resumer = (*FairDriver)(nil)
	_ driver.Resumer = (*SemaphoreDriver)(nil)
)

// Resume implements driver.Resumer for the semaphore: one script that extends
// the permit's lease to h.TTL if h.Owner holds a permit with token (the lock
// hash keeps each holder's token), and never creates one.
func (d *SemaphoreDriver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	sent := time.Now()
	n, err := redisscript.LeaseExtend.Run(ctx, d.c.sc, leaseKeys(h.Key, h.Owner), h.Owner, h.TTL.Milliseconds(), semMarker, strconv.FormatUint(token, 10)).Int64()
	switch {
	case err != nil:
		return driver.Grant{}, mapErr(err)
	case n != 1:
		return driver.Grant{}, notHeld(h.Key)
	}
	g := driver.Grant{Token: token, TTL: h.TTL}
	g.Lost = &d.c.hub.holding(d, h.Key, h.Owner, nil, sent).LossSignal
	return g, nil
}

// Resume implements driver.Resumer for the plain lock (see conn.resume).
func (d *Driver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	return d.c.resume(ctx, d, h, token, &plainHolding{token: token, waiting: waitingKey(h.Key)})
}

// Resume implements driver.Resumer for the fair lock, whose holding is a lock
// record as the plain lock's is (see conn.resume).
func (d *FairDriver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	return d.c.resume(ctx, d, h, token, token)
}

// resume takes up the holding h of holder's kind with token: one script that
// extends its lock record to h.TTL if h.Owner holds it with token, and never
// creates it. The grant carries handle, and the holding is registered for
// the loss push as an acquisition's is.
func (c *conn) resume(ctx context.Context, holder driver.Driver, h driver.Holding, token uint64, handle any) (driver.Grant, error) {
	if strings.IndexByte(h.Owner, ' ') >= 0 {
		return driver.Grant{}, fmt.Errorf("%w: redislock: owner %q contains a space", driver.ErrInvalid, h.Owner)
	}
	sent := time.Now()
	n, err := redisscript.Resume.Run(ctx, c.sc, []string{LockKey(h.Key)}, h.Owner, h.TTL.Milliseconds(), strconv.FormatUint(token, 10)).Int64()
	if _, err := extendReply(h.Key, n, err, h.TTL); err != nil {
		return driver.Grant{}, err
	}
	g := driver.Grant{Token: token, TTL: h.TTL, Handle: handle}
	g.Lost = &c.hub.holding(holder, h.Key, h.Owner, handle, sent).LossSignal
	return g, nil
}
