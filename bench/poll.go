package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"
)

// poller is the pause between two attempts of a locker that polls every
// fixedRetry; its one timer is made at the first pause.
type poller struct{ t *time.Timer }

// pause waits fixedRetry, or until ctx ends (then it returns errNotObtained
// joined with ctx's error).
func (p *poller) pause(ctx context.Context) error {
	if p.t == nil {
		p.t = time.NewTimer(fixedRetry)
	} else {
		p.t.Reset(fixedRetry)
	}
	select {
	case <-ctx.Done():
		return errors.Join(errNotObtained, ctx.Err())
	case <-p.t.C:
		return nil
	}
}

// stop releases the timer.
func (p *poller) stop() {
	if p.t != nil {
		p.t.Stop()
	}
}

// randomToken returns 32 random hex digits: the owner id of one holding.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
