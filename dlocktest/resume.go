package dlocktest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// client returns l as a *dlock.Client, or skips the test.
func client(t *testing.T, l dlock.Locker) *dlock.Client {
	t.Helper()
	c, ok := l.(*dlock.Client)
	if !ok {
		t.Skipf("the Locker is a %T, not a *dlock.Client", l)
	}
	return c
}

// resumable reports whether c's driver resumes holdings; when it does not,
// it checks that Detach refuses with errors.ErrUnsupported and leaves the lease
// held.
func resumable(t *testing.T, c *dlock.Client, key string) bool {
	t.Helper()
	if _, ok := c.Driver().(driver.Resumer); ok {
		return true
	}
	l := mustLock(t, c, key)
	if _, err := l.Detach(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Detach on a backend without driver.Resumer: %v, want errors.ErrUnsupported", err)
	}
	if l.Err() != nil {
		t.Fatalf("a refused Detach ended the lease: %v", l.Err())
	}
	unlock(t, l)
	return false
}

// alterRef rewrites one field of a lease reference's contents, as a forger
// would.
func alterRef(t *testing.T, ref, field string, v any) string {
	t.Helper()
	body, _ := strings.CutPrefix(ref, driver.RefPrefix)
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatalf("reference %q: %v", ref, err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("reference %q: %v", ref, err)
	}
	m[field] = v
	b, _ = json.Marshal(m)
	return driver.RefPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// testDetachResume: a detached holding is resumed by another Client with its
// token, renews, excludes, unlocks; a reference of a holding that is gone is
// refused with ErrNotHeld, a bad one with ErrInvalid.
func testDetachResume(t *testing.T, b Backend) {
	key := Key(t)
	a := client(t, b.New(t))
	if !resumable(t, a, key) {
		return
	}
	ttl := scaled(a, time.Second)
	la := mustLock(t, a, key, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
	ref, err := la.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	select {
	case <-la.Done():
	default:
		t.Fatal("Done not closed by Detach")
	}
	if !errors.Is(la.Err(), dlock.ErrReleased) {
		t.Fatalf("detached lease's Err %v, want ErrReleased", la.Err())
	}
	if _, err := la.Detach(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Detach: %v, want ErrNotHeld", err)
	}
	if err := la.Unlock(ctxT(t, 5*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock after Detach: %v, want ErrNotHeld (the holding is the reference's)", err)
	}
	other := b.New(t)
	if _, err := other.TryLock(ctxT(t, 5*time.Second), key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a detached holding: %v, want ErrNotObtained", err)
	}

	c := client(t, b.New(t))
	lc, err := c.Resume(ctxT(t, 10*time.Second), ref)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if lc.Key() != key || lc.Token() != la.Token() || lc.Owner() != la.Owner() {
		t.Fatalf("resumed lease %q token %d owner %q, want %q %d %q", lc.Key(), lc.Token(), lc.Owner(), key, la.Token(), la.Owner())
	}
	// The resumed lease renews: it outlives its TTL three times over.
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		if _, err := other.TryLock(ctxT(t, 5*time.Second), key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock into a resumed, renewed lease: %v (its Err: %v)", err, lc.Err())
		}
		select {
		case <-lc.Done():
			t.Fatalf("resumed lease lost: %v", lc.Err())
		case <-time.After(ttl / 4):
		}
	}
	if err := lc.Extend(ctxT(t, 5*time.Second), 2*ttl); err != nil {
		t.Fatalf("Extend of a resumed lease: %v", err)
	}
	unlock(t, lc)
	if _, err := c.Resume(ctxT(t, 5*time.Second), ref); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Resume after the holding was released: %v, want ErrNotHeld", err)
	}
	ln := mustLock(t, other, key, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
	if ln.Token() <= lc.Token() {
		t.Errorf("token after the resumed holding %d not above %d", ln.Token(), lc.Token())
	}

	// A reference whose token or owner was altered names no holding; one of
	// another backend or kind, or truncated, is no reference for this Client.
	ref2, err := ln.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	for _, bad := range []struct {
		field string
		v     any
	}{{"t", ln.Token() + 1}, {"t", ln.Token() - 1}, {"o", strings.Repeat("f", 32)}} {
		if _, err := c.Resume(ctxT(t, 5*time.Second), alterRef(t, ref2, bad.field, bad.v)); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Resume with %s altered to %v: %v, want ErrNotHeld", bad.field, bad.v, err)
		}
	}
	for name, bad := range map[string]string{
		"truncated":       ref2[:len(ref2)-5],
		"another backend": alterRef(t, ref2, "b", "other"),
		"another kind":    alterRef(t, ref2, "k", "other"),
		"not a reference": "hello",
		"empty":           "",
		"no token":        alterRef(t, ref2, "t", 0),
		"unknown field":   alterRef(t, ref2, "x", 1),
	} {
		if _, err := c.Resume(ctxT(t, 5*time.Second), bad); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resume of a reference %s: %v, want ErrInvalid", name, err)
		}
	}
	// The rejected references touched nothing: the real one resumes.
	lr, err := c.Resume(ctxT(t, 10*time.Second), ref2)
	if err != nil {
		t.Fatalf("Resume after rejected forgeries: %v", err)
	}
	if _, err := c.ForceUnlock(ctxT(t, 5*time.Second), key); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			unlock(t, lr)
			return
		}
		t.Fatalf("ForceUnlock: %v (the resumed lease's Err: %v)", err, lr.Err())
	}
	// A forced holding: the resumed lease is told (at once, or at its next
	// renewal at the latest), and its reference resumes nothing.
	select {
	case <-lr.Done():
	case <-time.After(2 * ttl):
		t.Fatalf("resumed lease not told of a force-unlock within %v", 2*ttl)
	}
	if !errors.Is(lr.Err(), dlock.ErrLockLost) {
		t.Fatalf("forced resumed lease's Err %v, want ErrLockLost", lr.Err())
	}
	if _, err := c.Resume(ctxT(t, 5*time.Second), ref2); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Resume of a forced holding: %v, want ErrNotHeld", err)
	}
}

// Resumed returns a Locker whose leases are taken by from, detached, and
// taken up by to with Resume, with the same options: the leases a test gets
// from it are resumed ones (for PushedLoss, say). Its Lock is its TryLock.
func Resumed(from, to *dlock.Client) dlock.Locker { return resumed{from, to} }

type resumed struct{ from, to *dlock.Client }

func (r resumed) TryLock(ctx context.Context, key string, opts ...dlock.Option) (*dlock.Lease, error) {
	l, err := r.from.TryLock(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	ref, err := l.Detach()
	if err != nil {
		_ = l.Unlock(ctx)
		return nil, err
	}
	return r.to.Resume(ctx, ref, opts...)
}

func (r resumed) Lock(ctx context.Context, key string, opts ...dlock.Option) (*dlock.Lease, error) {
	return r.TryLock(ctx, key, opts...)
}
