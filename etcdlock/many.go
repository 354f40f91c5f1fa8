package etcdlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// checksPerTxn bounds the entries one transaction of extendMany reads (etcd
// refuses a transaction of more than 128 operations by default).
const checksPerTxn = 100

var _ driver.BatchExtender = (*Driver)(nil)

// ExtendMany implements driver.BatchExtender (see extendMany): a Client's
// renewals of many locks cost at most one renewal of each shared lease and
// one read per hundred holdings.
func (d *Driver) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	hs := make([]driver.Holding, len(reqs))
	ttls := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		hs[i], ttls[i] = r.Holding, r.TTL
	}
	granted, errs := d.extendMany(ctx, hs, ttls)
	out := make([]driver.ExtendResult, len(reqs))
	for i := range out {
		out[i] = driver.ExtendResult{TTL: granted[i], Err: errs[i]}
	}
	return out
}

// extendMany extends every holding hs[i] as Extend does with ttls[i], in as
// few round trips as it can: for each TTL, at most one renewal of the
// Driver's lease of that TTL (shared by all its holdings), and one read-only
// transaction per checksPerTxn holdings on it, which checks that each entry is
// still the one written for its holding. A holding whose entry is gone fails
// alone (dlock.ErrNotHeld); a round trip that fails fails the holdings it
// carried. Holdings without a handle, or whose entry is on the lease of
// another TTL, are extended one by one.
func (d *Driver) extendMany(ctx context.Context, hs []driver.Holding, ttls []time.Duration) ([]time.Duration, []error) {
	ctx, done := d.request(ctx)
	granted := make([]time.Duration, len(hs))
	errs := make([]error, len(hs))
	classes := map[int64][]int{}
	for i, hd := range hs {
		h, err := handleOf(hd.Handle)
		if err == nil {
			err = checkOwner(hd.Owner)
		}
		switch {
		case err != nil:
			errs[i] = err
		case h == nil:
			granted[i], errs[i] = d.extend(ctx, hd, ttls[i])
		default:
			secs := leaseSeconds(ttls[i])
			classes[secs] = append(classes[secs], i)
		}
	}
	for secs, is := range classes {
		start := time.Now()
		sl, err := d.lease(ctx, secs, start)
		if err != nil {
			for _, i := range is {
				errs[i] = err
			}
			continue
		}
		id := sl.leaseID()
		var batch []int // entries on sl, checked together
		for _, i := range is {
			if _, lease, _ := hs[i].Handle.(*queueEntry).state(); lease == id {
				batch = append(batch, i)
			} else {
				granted[i], errs[i] = d.extend(ctx, hs[i], ttls[i])
			}
		}
		for len(batch) > 0 {
			n := min(len(batch), checksPerTxn)
			d.checkEntries(ctx, hs, batch[:n], sl, start, secs, granted, errs)
			batch = batch[n:]
		}
	}
	for i, err := range errs {
		errs[i] = done(err)
	}
	return granted, errs
}

// checkEntries reads the entries of the holdings hs[i] for i in is, all on
// sl, in one transaction, and records each one's outcome.
func (d *Driver) checkEntries(ctx context.Context, hs []driver.Holding, is []int, sl *sharedLease, start time.Time, secs int64,
	granted []time.Duration, errs []error) {
	ops := make([]clientv3.Op, len(is))
	ends := make([]func(bool, time.Time), len(is))
	for j, i := range is {
		h := hs[i].Handle.(*queueEntry)
		ops[j] = clientv3.OpGet(h.entry, clientv3.WithKeysOnly())
		ends[j] = h.renewing()
	}
	resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
	id := sl.leaseID()
	for j, i := range is {
		h := hs[i].Handle.(*queueEntry)
		if err != nil {
			ends[j](false, start)
			errs[i] = mapErr(err)
			continue
		}
		kvs := resp.Responses[j].GetResponseRange().Kvs
		ok := len(kvs) == 1 && kvs[0].CreateRevision == h.revision() && kvs[0].Lease == int64(id)
		ends[j](ok, start)
		if !ok {
			h.detachAll()
			errs[i] = notHeld(hs[i].Key)
			continue
		}
		granted[i] = seconds(secs)
	}
}
