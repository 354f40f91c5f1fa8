package driver

import (
	"context"
	"reflect"
	"time"
)

// CleanupTimeout bounds the detached clean-up calls made after a cancelled or
// failed request (abandoning an acquisition whose outcome is unknown, an Unlock
// called with an expired context, the release after a lease was lost), by the
// Client and by drivers alike; see CleanupContext.
const CleanupTimeout = 2 * time.Second

// CleanupContext returns a context for a clean-up call that must run although
// ctx ended: it keeps ctx's values, not its cancellation, and ends after
// CleanupTimeout. Call cancel when the clean-up returns.
func CleanupContext(ctx context.Context) (cctx context.Context, cancel context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

// IsNil reports whether v is nil or an interface value holding a nil pointer,
// map, channel, function, slice or interface. Backends use it to reject
// typed-nil clients with ErrInvalid instead of panicking later.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
