package etcdlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TestArrivalInFlightAfterWithdrawCountsNobody: a barrier arrival whose
// transaction is still on its way when its caller gives up (its reply lost,
// here: the caller is told context.Canceled, and the transaction reaches the
// server after the withdrawal that follows found nothing to take back) leaves
// no party behind. Before the fix the late transaction registered the party
// for its TTL, and one more party opened the barrier one short.
func TestArrivalInFlightAfterWithdrawCountsNobody(t *testing.T) {
	var late atomic.Bool
	applied := make(chan error, 1)
	delayTxn := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method != "/etcdserverpb.KV/Txn" || !late.CompareAndSwap(true, false) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		go func() {
			time.Sleep(300 * time.Millisecond) // after the withdrawal
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			applied <- invoker(ctx, method, req, reply, cc, opts...)
		}()
		return context.Canceled
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{srv.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(delayTxn)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	d, err := NewDriver(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := "inflight-" + t.Name()
	late.Store(true)
	if _, err := d.Arrive(ctx, name, "a", 2, time.Minute); err == nil {
		t.Fatal("the arrival whose reply was lost succeeded")
	}
	if _, err := d.Withdraw(ctx, name, "a", 2); err != nil {
		t.Fatalf("Withdraw: %v", err)
	}
	select {
	case <-applied: // applied, or refused for its revoked lease: either way it reached the server
	case <-ctx.Done():
		t.Fatal("the late transaction never came back")
	}
	n, _, err := d.Depart(ctx, name, "nobody", 2)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d parties at the barrier after the only one withdrew", n)
	}
	open, err := d.Arrive(ctx, name, "b", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if open {
		t.Fatal("one party of two opened the barrier")
	}
	if _, err := d.Withdraw(ctx, name, "b", 2); err != nil {
		t.Fatal(err)
	}
}
