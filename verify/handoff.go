package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// The hand-off workload (Spec.Workload WorkloadHandOff): a worker takes a
// lock, holds it, writes the resource with its token, and either releases it
// or detaches its lease and hands the reference to another worker process
// (through a list on the resource's server); a worker that picks a reference
// up resumes it, now and then only after the holding's TTL has run out,
// holds, writes and releases it. The nemesis runs its faults meanwhile. A
// resumed holding is a grant of its own for the other checkers (exclusion,
// told-first, fencing by the resource); Analysis.HandOff judges the
// hand-overs themselves.

// Operations of the hand-off workload.
const (
	OpDetach = "detach" // Lease.Detach (Token: the holding's)
	OpResume = "resume" // Client.Resume (Token: the reference's; Deadline: the resumed lease's)
	// OpDetachedRenewal is a detached lease's deadline seen moving after
	// Detach returned: something still renews the holding there.
	OpDetachedRenewal = "detached-renewal"
)

// Workloads of Spec.Workload.
const (
	WorkloadHandOff = "handoff" // see OpDetach
	WorkloadOnce    = "once"    // see OpOnce
)

// handOffList is the list of the resource's server that detached references
// wait in for a worker to resume them.
const handOffList = "handoff:refs"

// handOffRound is one round of the hand-off workload: resume a reference
// another worker handed over (half the rounds, when there is one), or take
// the lock, hold it, and release or detach it.
func (w *worker) handOffRound(ctx context.Context) {
	// A worker that has just handed a holding over leaves it to another.
	if detached := w.detached; !detached && w.rng.IntN(4) != 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		ref, err := w.res.RPop(rctx, handOffList).Result()
		cancel()
		if err == nil {
			w.resume(ctx, ref)
			return
		}
	}
	w.detached = false
	key := w.s.Keys[w.rng.IntN(len(w.s.Keys))]
	mode := []string{"try", "wait"}[w.rng.IntN(2)]
	id := w.rec.NextID()
	w.rec.Record(Event{Op: OpAcquire, Type: Invoke, ID: id, Key: key, Mode: mode})
	opts := []dlock.Option{dlock.WithTTL(w.s.TTL)}
	if mode == "wait" {
		opts = append(opts, dlock.WithWait(w.s.Wait))
	}
	acquire := w.client.TryLock
	if mode == "wait" {
		acquire = w.client.Lock
	}
	l, err := acquire(context.WithoutCancel(ctx), key, opts...)
	w.acquired(Event{Op: OpAcquire, ID: id, Key: key, Mode: mode}, l, err)
	if err != nil {
		w.pause(ctx, w.s.TTL/4) // picking a reference up may come next
		return
	}
	w.hold(ctx, l, false)
	if w.rng.IntN(2) == 0 {
		w.detach(ctx, l)
		return
	}
	w.release(l, key)
}

// detach detaches l, records it, and hands its reference over.
func (w *worker) detach(ctx context.Context, l *dlock.Lease) {
	id := w.rec.NextID()
	w.rec.Record(Event{Op: OpDetach, Type: Invoke, ID: id, Key: l.Key(), Token: l.Token(), Deadline: w.deadline(l)})
	ref, err := l.Detach()
	if err != nil { // a lease already lost: nothing to hand over
		w.rec.Record(Event{Op: OpDetach, Type: Fail, ID: id, Key: l.Key(), Token: l.Token(), Err: errText(err)})
		return
	}
	w.rec.Record(Event{Op: OpDetach, Type: OK, ID: id, Key: l.Key(), Token: l.Token()})
	w.detached = true
	go w.watchDetached(l)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = w.res.LPush(pctx, handOffList, ref).Err() // a reference lost here expires with its holding
}

// watchDetached records l's deadline moving after it was detached (for two
// TTLs): nothing may renew a detached holding in its old process.
func (w *worker) watchDetached(l *dlock.Lease) {
	last := l.Deadline()
	tick := time.NewTicker(w.s.TTL / 8)
	defer tick.Stop()
	for range 16 {
		<-tick.C
		if d := l.Deadline(); !d.Equal(last) {
			last = d
			w.rec.Record(Event{Op: OpDetachedRenewal, Key: l.Key(), Token: l.Token(), Deadline: w.deadline(l)})
		}
	}
}

// resume resumes ref, after a short while, or (a share of the times, Spec.LateResumes) after its
// holding's TTL has run out, when the store must refuse it; a resumed lease
// is held, written with and released.
func (w *worker) resume(ctx context.Context, ref string) {
	r, err := driver.ParseRef(ref)
	if err != nil {
		w.rec.Record(Event{Op: OpResume, Type: Fail, Err: errText(err)})
		return
	}
	late := time.Duration(w.rng.Int64N(int64(w.s.TTL/4) + 1))
	share := w.s.LateResumes
	if share == 0 {
		share = 0.5
	}
	if w.rng.Float64() < share {
		after := w.s.LateAfter
		if after == 0 {
			after = 2 * w.s.TTL
		}
		late = after + time.Duration(w.rng.Int64N(int64(w.s.TTL/2)+1))
	}
	t := time.NewTimer(late)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	id := w.rec.NextID()
	w.rec.Record(Event{Op: OpResume, Type: Invoke, ID: id, Key: r.Key, Token: r.Token})
	l, err := w.client.Resume(context.WithoutCancel(ctx), ref)
	if err != nil {
		typ := Info
		if errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
			typ = Fail
		}
		w.rec.Record(Event{Op: OpResume, Type: typ, ID: id, Key: r.Key, Token: r.Token, Err: errText(err)})
		return
	}
	w.rec.Record(Event{Op: OpResume, Type: OK, ID: id, Key: r.Key, Token: l.Token(), Deadline: w.deadline(l)})
	go w.watch(l, r.Key)
	w.hold(ctx, l, false)
	w.release(l, r.Key) // a resumed holding is not handed on: waiters are served
}

// handOffSlack is how long after a Detach completed the store may still
// keep its holding beyond the TTL: a renewal on its way when Detach stopped
// the renewals, which a loaded host may hold up for a while.
func handOffSlack(ttl time.Duration) int64 { return int64(ttl/2 + 100*time.Millisecond) }

// HandOff judges the hand-overs: a Resume that succeeded took up a holding
// that was detached and still there: not after its TTL had run out since the
// Detach (and handOffSlack), nor after a grant of the key with a greater
// token, nor after a force-unlock of it, but across a fault the docs name as
// unsafe, or a fault of the store or the network that may have held a
// renewal back; and nothing renews a detached lease in the process that
// detached it (OpDetachedRenewal: two renewers of one holding).
func (a *Analysis) HandOff() *Violation {
	type det struct{ inv, ok Event }
	var detached []det
	inv := map[string]Event{}
	for _, e := range a.H {
		switch {
		case e.Op == OpDetachedRenewal:
			return &Violation{Checker: "hand-off", Lines: []int{e.Line},
				Msg: fmt.Sprintf("key %s: worker %d's detached lease of token %d was renewed after Detach returned", e.Key, e.Proc, e.Token)}
		case e.Op != OpDetach && e.Op != OpResume:
			continue
		case e.Type == Invoke:
			inv[opKey(e)] = e
			continue
		}
		in, ok := inv[opKey(e)]
		if !ok || e.Type != OK {
			continue
		}
		if e.Op == OpDetach {
			detached = append(detached, det{in, e})
			continue
		}
		var d *det
		for i := range detached {
			if x := &detached[i]; x.ok.Key == e.Key && x.ok.Token == e.Token && x.ok.T < in.T {
				d = x
			}
		}
		if d == nil {
			return &Violation{Checker: "hand-off", Lines: []int{in.Line, e.Line},
				Msg: fmt.Sprintf("key %s: worker %d resumed token %d, which no worker had detached", e.Key, e.Proc, e.Token)}
		}
		if a.unsafeBetween(d.inv.T, in.T) {
			continue
		}
		for _, g := range a.grants[e.Key] {
			if !g.resumed && g.ok.Token > e.Token && g.ok.T < in.T {
				return &Violation{Checker: "hand-off", Lines: []int{d.ok.Line, g.ok.Line, in.Line, e.Line},
					Msg: fmt.Sprintf("key %s: worker %d resumed token %d after token %d had been granted to worker %d", e.Key, e.Proc, e.Token, g.ok.Token, g.ok.Proc)}
			}
		}
		for _, fo := range a.forces {
			if fo.ok.Key == e.Key && (fo.ok.Token == 0 || fo.ok.Token == e.Token) && fo.ok.T > d.inv.T && fo.ok.T < in.T {
				return &Violation{Checker: "hand-off", Lines: []int{d.ok.Line, fo.ok.Line, in.Line, e.Line},
					Msg: fmt.Sprintf("key %s: worker %d resumed token %d after a force-unlock removed it", e.Key, e.Proc, e.Token)}
			}
		}
		limit := int64(a.P.TTL) + handOffSlack(a.P.TTL)
		if a.P.Detached > 0 {
			limit = int64(a.P.Detached)
		}
		if late := in.T - d.ok.T; late > limit && !a.faultNear(d.inv.T-int64(a.P.TTL), in.T, noProc) {
			return &Violation{Checker: "hand-off", Lines: []int{d.ok.Line, in.Line, e.Line},
				Msg: fmt.Sprintf("key %s: worker %d resumed token %d %v after its Detach, past its TTL of %v", e.Key, e.Proc, e.Token,
					time.Duration(late).Round(time.Millisecond), a.P.TTL)}
		}
	}
	return nil
}
