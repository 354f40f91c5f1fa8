package verify

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// forceHeld force-unlocks the first of keys, from the one at first on, that in
// shows held, and records the fault: its completion names the holding removed
// (OK), a lock freed in between (Fail), or an unknown outcome (Info). It
// reports false when no key was held.
func forceHeld(ctx context.Context, in driver.Inspector, keys []string, first int, rec *Recorder) bool {
	for i := range keys {
		key := keys[(first+i)%len(keys)]
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := in.Inspect(ictx, key)
		cancel()
		if err != nil || !info.Held {
			continue
		}
		e := Event{Op: OpNemesis, Type: Invoke, Fault: FaultForce, Target: -1, Key: key}
		rec.Record(e)
		fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err = in.ForceUnlock(fctx, key)
		cancel()
		switch {
		case err == nil:
			e.Type, e.Token, e.Owner = OK, info.Token, info.Owner
		case errors.Is(err, dlock.ErrNotHeld):
			e.Type = Fail
		default:
			e.Type, e.Err = Info, err.Error()
		}
		rec.Record(e)
		return true
	}
	return false
}
