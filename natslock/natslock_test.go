package natslock

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

func newClient(t testing.TB, opts ...dlock.Option) *Client {
	t.Helper()
	c, err := NewClient(newDriver(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "natslock", Kind: driver.KindMutex},
		New:  func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newClient(t, opts...) },
		Occupy: func(t testing.TB, key string) func() bool {
			js := connect(t, srv.URL)
			kv, err := js.KeyValue(ctxT(t, 10*time.Second), DefaultBucket)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctxT(t, 10*time.Second), key, []byte("user data")); err != nil {
				t.Fatal(err)
			}
			return func() bool {
				e, err := kv.Get(ctxT(t, 10*time.Second), key)
				return err == nil && string(e.Value()) == "user data"
			}
		},
	})
}
