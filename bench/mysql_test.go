package main

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// TestMySQLQuick runs scenarios a and bc, quick, with mysqllock (plain and
// fair) and GET_LOCK side by side: all measured, nothing lost or
// overlapping, and an uncontended cycle two statements for each (a key's first lock inserts its
// row: a few more in a short run).
func TestMySQLQuick(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick", "-scenarios", "a,bc", "-variants", "mysql,mysql/fair,mysql/getlock", "-a-g", "1,4", "-b-g", "4"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.needs(onMySQL) || cfg.needs(onPG) {
		t.Fatalf("the MySQL variants need MariaDB and no PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var tables, lines, progress bytes.Buffer
	ms, err := run(ctx, cfg, &tables, &lines, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if m.Kind != "run" {
			continue
		}
		seen[m.Scenario+" "+m.Variant] = true
		for _, f := range []string{"lost", "overlaps", "errors"} {
			if v := m.M[f]; v != 0 {
				t.Errorf("%s n=%d %s: %s = %v", m.Scenario, m.N, m.Variant, f, v)
			}
		}
		if c := m.M["cmds_per_cycle_client"]; m.Scenario == "a" && (c < 2 || c > 2.3) {
			t.Errorf("a n=%d %s: %.2f statements per cycle, want 2", m.N, m.Variant, c)
		}
	}
	for _, s := range []string{"a mysql", "a mysql/fair", "a mysql/getlock", "bc mysql", "bc mysql/fair", "bc mysql/getlock"} {
		if !seen[s] {
			t.Errorf("%s: no measurement\n%s", s, progress.String())
		}
	}
	if cfg, _ := parseFlags([]string{"-variants", "dlock,pg"}, io.Discard); cfg.needs(onMySQL) {
		t.Error("a run without the MySQL variants starts MariaDB")
	}
}
