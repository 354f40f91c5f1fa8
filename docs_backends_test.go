package dlock_test

import (
	"os"
	"strings"
	"testing"
)

// TestPackageDocNamesEveryBackend checks that the package documentation (what
// go doc shows) names every backend in its list of backends and in "What each
// backend guarantees".
func TestPackageDocNamesEveryBackend(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	intro, guarantees, ok := strings.Cut(string(src), "# What each backend guarantees")
	if !ok {
		t.Fatal(`doc.go has no section "What each backend guarantees"`)
	}
	guarantees, _, _ = strings.Cut(guarantees, "\n//\n// docs/safety.md")
	_, intro, ok = strings.Cut(intro, "\n// The backends: ")
	if !ok {
		t.Fatal(`doc.go has no paragraph "The backends: ..." after its example`)
	}
	intro, _, _ = strings.Cut(intro, "\n//\n") // that paragraph
	for _, b := range []struct{ name, pkg string }{
		{"Redis", "redislock"}, {"Redlock", "redlock"}, {"etcd", "etcdlock"},
		{"ZooKeeper", "zklock"}, {"PostgreSQL", "pglock"},
	} {
		if !strings.Contains(intro, b.name) || !strings.Contains(intro, b.pkg) {
			t.Errorf("the package documentation's list of backends does not name %s (%s)", b.name, b.pkg)
		}
		if !strings.Contains(guarantees, "\n// "+b.name+" (package "+b.pkg) {
			t.Errorf(`"What each backend guarantees" has no paragraph "%s (package %s"`, b.name, b.pkg)
		}
	}
}
