package redlock

import (
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// TestMajorityNamesTheTokenHandedOut: the token of a majority holding is the
// one recorded on the most of its nodes, also when nodes that lost the
// holding took it anew with greater tokens of their own and the token handed
// out is left on fewer than a majority (before, the greatest token was named:
// a force-unlock then named a token its holder never had).
func TestMajorityNamesTheTokenHandedOut(t *testing.T) {
	d := &Driver{quorum: 3}
	held := func(tok uint64) driver.LockInfo {
		return driver.LockInfo{Key: "k", Held: true, Owner: "o", Token: tok}
	}
	for _, tc := range []struct {
		name  string
		infos []driver.LockInfo
		want  uint64
	}{
		{"on a majority", []driver.LockInfo{held(10), held(10), held(10), held(12)}, 10},
		{"one node took it anew", []driver.LockInfo{held(10), held(10), held(14)}, 10},
		{"two took it anew", []driver.LockInfo{held(10), held(10), held(14), held(15)}, 10},
		{"no token on two", []driver.LockInfo{held(10), held(14), held(15)}, 15},
	} {
		info, ok := d.majority("k", tc.infos)
		if !ok || info.Token != tc.want {
			t.Errorf("%s: held %v token %d, want %d", tc.name, ok, info.Token, tc.want)
		}
	}
}
