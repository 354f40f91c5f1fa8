package pglock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

var (
	_ driver.Resumer = (*Driver)(nil)
	_ driver.Resumer = (*FairDriver)(nil)
)

// Resume implements driver.Resumer: one statement moves the expiry of the
// owner's live row to h.TTL from now, if the row still carries token, and the
// holding is registered for the loss notification as a grant's is.
func (d *Driver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	if d == nil {
		return driver.Grant{}, errNilDriver
	}
	return d.resume(ctx, d, h, token)
}

// Resume implements driver.Resumer, as Driver.Resume: a fair lock's holder is
// a plain holder of its row.
func (f *FairDriver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	if f == nil {
		return driver.Grant{}, errNilDriver
	}
	return f.d.resume(ctx, f, h, token)
}

// resume takes up h with token for holder, the Driver of its kind.
func (d *Driver) resume(ctx context.Context, holder driver.Driver, h driver.Holding, token uint64) (driver.Grant, error) {
	var n int64
	sent := time.Now()
	err := d.do(ctx, "resume", func(ctx context.Context) error {
		tag, err := d.pool.Exec(ctx, d.q.resume, h.Key, h.Owner, micros(h.TTL), int64(token))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return driver.Grant{}, err
	}
	if n == 0 {
		return driver.Grant{}, notHeld(h.Key)
	}
	return driver.Grant{Token: token, TTL: h.TTL, Lost: d.ln.hold(holder, h.Key, h.Owner, sent)}, nil
}
