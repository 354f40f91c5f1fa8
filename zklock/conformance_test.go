package zklock

import (
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/go-zookeeper/zk"
)

func TestConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "zklock", Kind: driver.KindFair},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, err := NewClient(newDriver(t), opts...)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Occupy: occupy,
	})
}

// occupy makes the lock node of key a plain persistent node with data and a child
// that is not a lock node, and returns a check that both are unchanged.
func occupy(t testing.TB, key string) func() bool {
	d := newDriver(t)
	lp := d.lockPath(key)
	if err := d.makePath(ctxT(t, 5*time.Second), d.root); err != nil {
		t.Fatal(err)
	}
	if _, err := d.conn.Create(lp, []byte("foreign"), zk.FlagPersistent, d.acl); err != nil {
		t.Fatal(err)
	}
	if _, err := d.conn.Create(lp+"/x", []byte("y"), zk.FlagPersistent, d.acl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.conn.Delete(lp+"/x", -1)
		_ = d.conn.Delete(lp, -1)
	})
	return func() bool {
		data, _, err := d.conn.Get(lp)
		kids, _, err2 := d.conn.Children(lp)
		return err == nil && err2 == nil && string(data) == "foreign" && slices.Equal(kids, []string{"x"})
	}
}
