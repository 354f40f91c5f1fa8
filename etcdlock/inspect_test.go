package etcdlock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

func TestInspectListForceUnlock(t *testing.T) {
	d := newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	base := testKey(t)
	keys := []string{base + ":a/1", base + ":a/2", base + ":b"}
	grants := map[string]driver.Grant{}
	owners := map[string]string{}
	for _, k := range keys {
		o := owner()
		owners[k] = o
		grants[k] = mustGrant(t, d, driver.AcquireRequest{Key: k, Owner: o, TTL: 10 * time.Second, Metadata: "meta " + k})
	}
	// Two waiters on the first lock.
	for i := 0; i < 2; i++ {
		mustBusy(t, d, driver.AcquireRequest{Key: keys[0], Owner: owner(), TTL: 10 * time.Second, Waiting: true})
	}
	info, err := d.Inspect(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	want := dlock.LockInfo{Key: keys[0], Held: true, Owner: owners[keys[0]], Metadata: "meta " + keys[0], Token: grants[keys[0]].Token, Waiters: 2,
		Holders: 1, Limit: 1, LastToken: grants[keys[0]].Token, Kind: driver.KindFair}
	got := info
	got.TTL = 0
	if got != want || info.TTL <= 5*time.Second || info.TTL > 10*time.Second {
		t.Fatalf("Inspect: %+v, want %+v with TTL in (5s, 10s]", info, want)
	}
	list, err := driver.List(ctx, d, base+":a/*")
	if err != nil || len(list) != 2 || list[0].Key != keys[0] || list[1].Key != keys[1] || list[0].Waiters != 2 || list[1].Waiters != 0 {
		t.Fatalf("List(a/*): %+v, %v", list, err)
	}
	if list, err := driver.List(ctx, d, base+":?"); err != nil || len(list) != 1 || list[0].Key != keys[2] {
		t.Fatalf("List(?): %+v, %v", list, err)
	}
	// ForceUnlock removes the holder; the first waiter becomes the holder.
	if removed, err := d.ForceUnlock(ctx, keys[0]); err != nil || removed.Owner != owners[keys[0]] || !removed.Held {
		t.Fatalf("ForceUnlock: %+v, %v", removed, err)
	}
	h := driver.Holding{Key: keys[0], Owner: owners[keys[0]], Handle: grants[keys[0]].Handle}
	if _, err := d.Extend(ctx, h, 10*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after ForceUnlock: %v, want ErrNotHeld", err)
	}
	if info, err := d.Inspect(ctx, keys[0]); err != nil || info.Waiters != 1 || info.Token <= grants[keys[0]].Token {
		t.Fatalf("Inspect after ForceUnlock: %+v, %v", info, err)
	}
	for _, k := range keys {
		for {
			info, err := d.ForceUnlock(ctx, k)
			if errors.Is(err, dlock.ErrNotHeld) && !info.Held {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if info, err := d.Inspect(ctx, keys[0]); err != nil || info.Held || info.Key != keys[0] {
		t.Errorf("Inspect of a free lock: %+v, %v", info, err)
	}
	if list, err := driver.List(ctx, d, base+"*"); err != nil || len(list) != 0 {
		t.Errorf("List after ForceUnlock of all: %+v, %v", list, err)
	}
	for _, bad := range []string{"", "a{", "x\x00"} {
		if _, err := driver.List(ctx, d, bad); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("List(%q): %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := d.Inspect(ctx, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Inspect(\"\"): %v", err)
	}
	if _, err := d.ForceUnlock(ctx, "a}"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("ForceUnlock(\"a}\"): %v", err)
	}
}
