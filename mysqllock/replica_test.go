package mysqllock

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
)

// TestFailoverToALaggingReplica shows what docs/safety.md says of a failover
// to an asynchronous replica: the tokens the new primary grants are above
// those whose binlog events reached it, and a grant acknowledged on the old
// primary that had not is lost: the key is granted again to another owner,
// with the lost grant's token.
func TestFailoverToALaggingReplica(t *testing.T) {
	primary := testserver.StartMariaDBWith(t, testserver.MariaDBOptions{ServerID: 1})
	replica := testserver.StartMariaDBWith(t, testserver.MariaDBOptions{ServerID: 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pdb, rdb := newDBDSN(t, primary.DSN), newDBDSN(t, replica.DSN)
	exec := func(db *sql.DB, q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(rdb, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_USE_GTID=slave_pos", primary.Port))
	exec(rdb, "START SLAVE")

	pd, err := NewDriver(pdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pc := clientOf(t, pd)
	key := dlocktest.Key(t)
	l1, err := pc.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The replica has the released row with the first grant's token.
	testserver.Eventually(t, 20*time.Second, "the replica applying the first grant", func() bool {
		var tok sql.NullInt64
		err := rdb.QueryRowContext(ctx, "SELECT token FROM "+DefaultTable+" WHERE lock_key = ?", key).Scan(&tok)
		return err == nil && tok.Valid && uint64(tok.Int64) >= l1.Token()
	})
	// The replica falls behind: the next grant on the primary never reaches it.
	exec(rdb, "STOP SLAVE")
	l2, err := pc.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l1.Token() {
		t.Fatalf("second token %d not above %d", l2.Token(), l1.Token())
	}

	// Failover: the replica is promoted, the old primary's holder still
	// holds its lease.
	exec(rdb, "RESET SLAVE ALL")
	rd, err := NewDriver(rdb)
	if err != nil {
		t.Fatal(err)
	}
	rc := clientOf(t, rd)
	l3, err := rc.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryLock on the promoted replica while the old primary's grant holds: %v (the lost grant left nothing there)", err)
	}
	if l3.Token() <= l1.Token() {
		t.Errorf("token on the promoted replica %d not above the replicated grant's %d", l3.Token(), l1.Token())
	}
	if l3.Token() != l2.Token() {
		t.Errorf("token on the promoted replica %d, want the lost grant's %d handed out again", l3.Token(), l2.Token())
	}
	if l2.Err() != nil {
		t.Errorf("the old primary's holder was told of the failover: %v (it cannot be: its primary still runs)", l2.Err())
	}
	t.Logf("grants: %d replicated, %d lost in the failover, %d on the promoted replica (two holders at once)", l1.Token(), l2.Token(), l3.Token())
	_ = l3.Unlock(ctx)
	_ = l2.Unlock(ctx)
}
