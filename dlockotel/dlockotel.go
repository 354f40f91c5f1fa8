// Package dlockotel reports what dlock's locks do as OpenTelemetry metrics and
// traces: a dlock.Observer to pass to dlock.WithObserver, as a Client default
// or for one call.
//
//	obs, err := dlockotel.New() // the global MeterProvider and TracerProvider
//	client, err := redislock.New(rdb, dlock.WithObserver(obs))
//
// Metrics (durations in seconds, as float histograms):
//
//	dlock.acquire.duration  histogram  acquisitions by dlock.outcome, dlock.mode
//	dlock.acquire.attempts  histogram  attempts per acquisition
//	dlock.waiters           up-down    acquisitions waiting now
//	dlock.leases.held       up-down    leases held now
//	dlock.hold.duration     histogram  held time, by dlock.end (released, not_held, error, lost)
//	dlock.renewals          counter    watchdog renewals, by dlock.renewal.outcome
//	dlock.renewal.margin    histogram  time left to the local deadline when a renewal started
//	dlock.leases.lost       counter    losses, by dlock.loss.cause
//	dlock.wakeups           counter    wake-ups waiters received from the store
//	dlock.abandons          counter    given-up acquisitions cleaned up
//	dlock.leader            gauge      1 while this process leads dlock.role, 0 after
//
// Every metric carries dlock.backend, dlock.primitive and dlock.key.group: a
// low-cardinality name of the key, by default its prefix before the first ':'
// ("orders" for "orders:42") or NoGroup for a key without one, or what
// WithKeyGroup's function returns. The raw key (dlock.key) is added only with
// WithRawKey, since it makes one series per key.
//
// Spans: dlock.acquire around each TryLock and Lock (its status an error,
// with error.type, when no lease came back; events dlock.wake for each
// wake-up and dlock.abandon for a clean-up), and dlock.hold from the
// acquisition to the release or loss, with an event dlock.renewal.failed for
// each failed renewal and dlock.lost for the loss.
package dlockotel

import (
	"context"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the metrics and spans: the import
// path of this package.
const ScopeName = "github.com/dlock-go/dlock/dlockotel"

// Version is the version of this module, the instrumentation scope's version.
const Version = "0.1.0"

// Attribute keys.
const (
	AttrOutcome        = attribute.Key("dlock.outcome")
	AttrMode           = attribute.Key("dlock.mode")
	AttrBackend        = attribute.Key("dlock.backend")
	AttrPrimitive      = attribute.Key("dlock.primitive")
	AttrKeyGroup       = attribute.Key("dlock.key.group")
	AttrKey            = attribute.Key("dlock.key")
	AttrEnd            = attribute.Key("dlock.end")
	AttrRenewalOutcome = attribute.Key("dlock.renewal.outcome")
	AttrLossCause      = attribute.Key("dlock.loss.cause")
	AttrRole           = attribute.Key("dlock.role")
	AttrErrorType      = attribute.Key("error.type")
)

// Option configures New.
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	keyGroup func(string) string
	rawKey   bool
}

// WithMeterProvider sets the MeterProvider the metrics are made with. The
// default is otel.GetMeterProvider() at the time of New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithTracerProvider sets the TracerProvider the spans are made with. The
// default is otel.GetTracerProvider() at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithKeyGroup sets the function that names a key's group, the
// dlock.key.group attribute. It must return few distinct values. The default
// is KeyGroup.
func WithKeyGroup(f func(key string) string) Option {
	return func(c *config) {
		if f != nil {
			c.keyGroup = f
		}
	}
}

// WithRawKey adds the raw key as the dlock.key attribute of every metric and
// span when on: one series per key, for a small, fixed set of keys only. The
// default is off.
func WithRawKey(on bool) Option {
	return func(c *config) { c.rawKey = on }
}

// NoGroup is the key group KeyGroup gives a key without a ':'.
const NoGroup = "(none)"

// KeyGroup is the default key group: key's prefix before the first ':', or
// NoGroup when it has none, so that keys such as "invoice-42" share one
// group instead of making one each.
func KeyGroup(key string) string {
	if i := strings.IndexByte(key, ':'); i >= 0 {
		return key[:i]
	}
	return NoGroup
}

// Observer is a dlock.Observer that records metrics and spans. Make it with
// New; it is safe for concurrent use.
type Observer struct {
	dlock.NopObserver
	cfg    config
	tracer trace.Tracer

	acquireDuration metric.Float64Histogram
	attempts        metric.Int64Histogram
	waiters         metric.Int64UpDownCounter
	held            metric.Int64UpDownCounter
	holdDuration    metric.Float64Histogram
	renewals        metric.Int64Counter
	renewalMargin   metric.Float64Histogram
	lost            metric.Int64Counter
	wakeups         metric.Int64Counter
	abandons        metric.Int64Counter
	leader          metric.Int64Gauge
	staleTokens     metric.Int64Counter
}

var _ dlock.Observer = (*Observer)(nil)

// New returns an Observer recording with opts' providers, by default the
// global ones. It returns an error when an instrument cannot be made.
func New(opts ...Option) (*Observer, error) {
	cfg := config{keyGroup: KeyGroup}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	o := &Observer{cfg: cfg, tracer: cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))}
	m := cfg.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	seconds := metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	var err error
	set := func(e error) {
		if err == nil {
			err = e
		}
	}
	var e error
	o.acquireDuration, e = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a TryLock or Lock to its return."), seconds)
	set(e)
	o.attempts, e = m.Int64Histogram("dlock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made by one acquisition."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 5, 10, 20, 50, 100))
	set(e)
	o.waiters, e = m.Int64UpDownCounter("dlock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Lock calls waiting now."))
	set(e)
	o.held, e = m.Int64UpDownCounter("dlock.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now."))
	set(e)
	o.holdDuration, e = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, by how it ended."), seconds)
	set(e)
	o.renewals, e = m.Int64Counter("dlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Watchdog renewals, by outcome."))
	set(e)
	o.renewalMargin, e = m.Float64Histogram("dlock.renewal.margin", metric.WithUnit("s"),
		metric.WithDescription("Time left to the lease's local deadline when a renewal started."), seconds)
	set(e)
	o.lost, e = m.Int64Counter("dlock.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before Unlock, by cause."))
	set(e)
	o.wakeups, e = m.Int64Counter("dlock.wakeups", metric.WithUnit("{wakeup}"),
		metric.WithDescription("Wake-ups waiters received from the store's notifications."))
	set(e)
	o.abandons, e = m.Int64Counter("dlock.abandons", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Given-up acquisitions whose state was cleaned up."))
	set(e)
	o.leader, e = m.Int64Gauge("dlock.leader", metric.WithUnit("1"),
		metric.WithDescription("1 while this process leads the role, 0 after."))
	set(e)
	o.staleTokens, e = m.Int64Counter("dlock.fence.stale_tokens", metric.WithUnit("{write}"),
		metric.WithDescription("Fenced writes refused because the lease's token was stale (its lock had been taken since)."))
	set(e)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// attrs returns the attributes naming t's lock, followed by extra.
func (o *Observer) attrs(t dlock.Target, extra ...attribute.KeyValue) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 4+len(extra))
	kv = append(kv, AttrBackend.String(t.Backend), AttrPrimitive.String(t.Kind), AttrKeyGroup.String(o.cfg.keyGroup(t.Key)))
	if o.cfg.rawKey {
		kv = append(kv, AttrKey.String(t.Key))
	}
	return append(kv, extra...)
}

type parentKey struct{}

// AcquireStart starts the dlock.acquire span and counts a waiter.
func (o *Observer) AcquireStart(ctx context.Context, e dlock.AcquireStartEvent) context.Context {
	kv := o.attrs(e.Target, AttrMode.String(mode(e.Try)))
	if !e.Try {
		o.waiters.Add(ctx, 1, metric.WithAttributes(kv[:len(kv)-1]...))
	}
	sctx, _ := o.tracer.Start(context.WithValue(ctx, parentKey{}, ctx), "dlock.acquire",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...))
	return sctx
}

// AcquireEnd ends the dlock.acquire span, records the acquisition and, for a
// lease, starts its dlock.hold span.
func (o *Observer) AcquireEnd(ctx context.Context, e dlock.AcquireEndEvent) context.Context {
	kv := o.attrs(e.Target, AttrMode.String(mode(e.Try)))
	if !e.Try {
		o.waiters.Add(ctx, -1, metric.WithAttributes(kv[:len(kv)-1]...))
	}
	out := Outcome(e.Err)
	kv = append(kv, AttrOutcome.String(out))
	if e.Err != nil {
		kv = append(kv, AttrErrorType.String(out))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	o.acquireDuration.Record(ctx, e.Wait.Seconds(), opt)
	if e.Attempts > 0 {
		o.attempts.Record(ctx, int64(e.Attempts), opt)
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrOutcome.String(out), attribute.Int("dlock.attempts", e.Attempts))
	if e.Err != nil {
		span.SetAttributes(AttrErrorType.String(out))
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End()
	if e.Lease == nil {
		return ctx
	}
	o.held.Add(ctx, 1, metric.WithAttributes(o.attrs(e.Target)...))
	parent, _ := ctx.Value(parentKey{}).(context.Context)
	if parent == nil {
		parent = ctx
	}
	hctx, _ := o.tracer.Start(parent, "dlock.hold", trace.WithAttributes(o.attrs(e.Target,
		attribute.Int64("dlock.token", int64(e.Lease.Token())))...))
	return hctx
}

// Renewal records a renewal; a failed one is an event of the dlock.hold span.
func (o *Observer) Renewal(ctx context.Context, e dlock.RenewalEvent) {
	kv := o.attrs(e.Target)
	o.renewalMargin.Record(ctx, e.Margin.Seconds(), metric.WithAttributes(kv...))
	out := RenewalOutcome(e.Err)
	o.renewals.Add(ctx, 1, metric.WithAttributes(append(kv, AttrRenewalOutcome.String(out))...))
	if e.Err != nil {
		trace.SpanFromContext(ctx).AddEvent("dlock.renewal.failed", trace.WithAttributes(
			AttrRenewalOutcome.String(out), attribute.String("exception.message", e.Err.Error()),
			attribute.Float64("dlock.renewal.margin", e.Margin.Seconds())))
	}
}

// Loss records a loss and ends the dlock.hold span with it.
func (o *Observer) Loss(ctx context.Context, e dlock.LossEvent) {
	kv := o.attrs(e.Target)
	o.held.Add(ctx, -1, metric.WithAttributes(kv...))
	o.lost.Add(ctx, 1, metric.WithAttributes(append(kv, AttrLossCause.String(string(e.Cause)))...))
	o.holdDuration.Record(ctx, e.Held.Seconds(), metric.WithAttributes(append(kv, AttrEnd.String("lost"))...))
	span := trace.SpanFromContext(ctx)
	span.AddEvent("dlock.lost", trace.WithAttributes(AttrLossCause.String(string(e.Cause)),
		attribute.String("exception.message", errText(e.Err))))
	span.SetStatus(codes.Error, "lock lost: "+string(e.Cause))
	span.End()
}

// Release records an Unlock and ends the dlock.hold span.
func (o *Observer) Release(ctx context.Context, e dlock.ReleaseEvent) {
	kv := o.attrs(e.Target)
	o.held.Add(ctx, -1, metric.WithAttributes(kv...))
	end := "released"
	if e.Err != nil {
		end = ReleaseOutcome(e.Err)
	}
	o.holdDuration.Record(ctx, e.Held.Seconds(), metric.WithAttributes(append(kv, AttrEnd.String(end))...))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrEnd.String(end))
	if e.Err != nil {
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(time.Now()))
}

// Abandon counts a given-up acquisition's clean-up, an event of its
// dlock.acquire span.
func (o *Observer) Abandon(ctx context.Context, t dlock.Target) {
	o.abandons.Add(ctx, 1, metric.WithAttributes(o.attrs(t)...))
	trace.SpanFromContext(ctx).AddEvent("dlock.abandon")
}

// Wake counts a wake-up, an event of the waiter's dlock.acquire span.
func (o *Observer) Wake(ctx context.Context, t dlock.Target) {
	o.wakeups.Add(ctx, 1, metric.WithAttributes(o.attrs(t)...))
	trace.SpanFromContext(ctx).AddEvent("dlock.wake")
}

// Term sets dlock.leader for the role.
func (o *Observer) Term(ctx context.Context, e dlock.LeadershipEvent) {
	v := int64(0)
	if e.Leader {
		v = 1
	}
	o.leader.Record(ctx, v, metric.WithAttributes(AttrBackend.String(e.Backend), AttrRole.String(e.Key)))
}

// StaleToken counts a fenced write refused as stale, an event of the lease's
// dlock.hold span.
func (o *Observer) StaleToken(ctx context.Context, e dlock.StaleTokenEvent) {
	o.staleTokens.Add(ctx, 1, metric.WithAttributes(o.attrs(e.Target)...))
	trace.SpanFromContext(ctx).AddEvent("dlock.fence.stale_token", trace.WithAttributes(
		attribute.Int64("dlock.token", int64(e.Token)), attribute.Int64("dlock.fence.newest_token", int64(e.Newest))))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
