package natslock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The errors of a bucket or server that cannot keep a lock. Each is matched
// (with dlock.ErrRefused) by the error of the Driver's first call, and of
// every later one until the bucket is fixed: the Driver checks before it
// writes anything.
var (
	// ErrNoBucket: the bucket does not exist (Driver.Migrate creates it).
	ErrNoBucket = errors.New("natslock: no such bucket")

	// ErrNoKeyTTL: the bucket's stream does not allow per-message TTLs, or
	// has no limit marker TTL (LimitMarkerTTL), so that the server could
	// not expire a lock or tell its waiters when it did.
	ErrNoKeyTTL = errors.New("natslock: bucket without per-key TTLs")

	// ErrOldServer: the server is older than 2.11, the first with
	// per-message TTLs.
	ErrOldServer = errors.New("natslock: NATS server older than 2.11")

	// ErrNotDurable: the bucket is kept in memory, or its stream persists
	// writes asynchronously, so that a restart of a server forgets locks and
	// hands out lower fencing tokens again. WithVolatile accepts it.
	ErrNotDurable = errors.New("natslock: bucket that a restart forgets")
)

// open checks key (before any I/O) and returns the bucket, checked at the
// Driver's first use: the server's version and the bucket's settings.
func (d *Driver) open(ctx context.Context, key string) (*bucket, error) {
	if d == nil {
		return nil, errNilDriver
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: natslock: nil context", driver.ErrInvalid)
	}
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	return d.openBucket(ctx)
}

func (d *Driver) openBucket(ctx context.Context) (*bucket, error) {
	d.openMu.Lock()
	defer d.openMu.Unlock()
	if d.opened != nil {
		return d.opened, nil
	}
	if err := checkVersion(d.js.Conn().ConnectedServerVersion()); err != nil {
		return nil, err
	}
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	s, err := d.js.Stream(rctx, "KV_"+d.cfg.bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, errors.Join(driver.ErrRefused, fmt.Errorf("%w %q (Driver.Migrate creates it)", ErrNoBucket, d.cfg.bucket))
	}
	if err != nil {
		return nil, d.mapErr(ctx, "open bucket", err)
	}
	if err := d.checkConfig(s.CachedInfo().Config); err != nil {
		return nil, err
	}
	kv, err := d.js.KeyValue(rctx, d.cfg.bucket)
	if err != nil {
		return nil, d.mapErr(ctx, "open bucket", err)
	}
	d.opened = &bucket{kv: kv, stream: s}
	return d.opened, nil
}

// checkConfig refuses a bucket's stream that cannot keep a lock.
func (d *Driver) checkConfig(c jetstream.StreamConfig) error {
	switch {
	case !c.AllowMsgTTL || c.SubjectDeleteMarkerTTL <= 0:
		return errors.Join(driver.ErrRefused, fmt.Errorf("%w: bucket %q (create it with LimitMarkerTTL, as Driver.Migrate does)", ErrNoKeyTTL, d.cfg.bucket))
	case d.cfg.volatile:
		return nil
	case c.Storage == jetstream.MemoryStorage:
		return errors.Join(driver.ErrRefused, fmt.Errorf("%w: bucket %q is kept in memory (WithVolatile accepts it)", ErrNotDurable, d.cfg.bucket))
	case c.PersistMode != jetstream.DefaultPersistMode:
		return errors.Join(driver.ErrRefused, fmt.Errorf("%w: bucket %q persists its writes asynchronously (WithVolatile accepts it)", ErrNotDurable, d.cfg.bucket))
	}
	return nil
}

// checkVersion refuses a server older than 2.11.
func checkVersion(v string) error {
	if v == "" {
		return errors.Join(driver.ErrUnavailable, errors.New("natslock: not connected to a server"))
	}
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) >= 2 {
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		if err1 == nil && err2 == nil && (major > 2 || major == 2 && minor >= 11) {
			return nil
		}
	}
	return errors.Join(driver.ErrRefused, fmt.Errorf("%w: server version %q", ErrOldServer, v))
}

// Migrate creates the Driver's bucket for locks, if it does not exist: file
// storage, the Driver's replicas (WithReplicas), history 1, per-key TTLs with
// a limit marker TTL of DefaultMarkerTTL. It then checks the bucket as the
// Driver's first call does, and returns what that finds.
func (d *Driver) Migrate(ctx context.Context) error {
	if d == nil {
		return errNilDriver
	}
	if ctx == nil {
		return fmt.Errorf("%w: natslock: nil context", driver.ErrInvalid)
	}
	if err := checkVersion(d.js.Conn().ConnectedServerVersion()); err != nil {
		return err
	}
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	_, err := d.js.CreateKeyValue(rctx, jetstream.KeyValueConfig{
		Bucket:         d.cfg.bucket,
		Description:    "dlock locks",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       d.cfg.replicas,
		LimitMarkerTTL: DefaultMarkerTTL,
	})
	if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		return d.mapErr(ctx, "migrate", err)
	}
	_, err = d.openBucket(ctx)
	return err
}

// Check checks the bucket and the server as the Driver's first call does,
// before it writes anything, and returns what it finds: nil, or an error
// matching ErrNoBucket, ErrNoKeyTTL, ErrOldServer or ErrNotDurable (and
// dlock.ErrRefused), or dlock.ErrUnavailable. Call it at startup to learn of
// a bad bucket before the first lock.
func (d *Driver) Check(ctx context.Context) error {
	if d == nil {
		return errNilDriver
	}
	if ctx == nil {
		return fmt.Errorf("%w: natslock: nil context", driver.ErrInvalid)
	}
	_, err := d.openBucket(ctx)
	return err
}

// wrongLast reports whether err is JetStream's refusal of a publish whose
// expected last sequence of the subject was not the last.
func wrongLast(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// mapErr turns the error of one request into one matching the dlock
// sentinels, the cause wrapped: the end of ctx as it is; timeouts and
// connection failures as dlock.ErrUnavailable; the server's other refusals
// as dlock.ErrRefused.
func (d *Driver) mapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, driver.ErrInvalid) || errors.Is(err, driver.ErrConflict) || errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrNotHeld) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("natslock: %s: %w", op, cerr)
	}
	var ae *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrConnectionReconnecting):
		return errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: %s: %w", op, err))
	case errors.As(err, &ae) && ae.Code >= 500:
		return errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: %s: %w", op, err))
	}
	return errors.Join(driver.ErrRefused, fmt.Errorf("natslock: %s: %w", op, err))
}
