package main

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

func versionCommand() command {
	return command{
		name: "version", summary: "print dlock's version, commit and Go version",
		synopsis: "dlock version",
		help: `Prints the release dlock was built as, the commit it was built from (with its
time, and "modified" when the tree had changes), and the Go version. A build
of a tagged release prints the release; a build from a checkout prints the
release the checkout leads to, marked -dev (v0.2.0-dev), or the release
itself when it is the tagged commit. The commit is the one the build recorded
(go build stamps it from git; with -buildvcs=false, give it with
-ldflags "-X main.commit=$(git rev-parse HEAD)", else it is unknown).
"dlock --version" does the same.

examples:
  dlock version`,
		run: runVersion,
	}
}

func runVersion(_ context.Context, e *env, args []string) int {
	c := versionCommand()
	a, code, ok := parseFlags(e, c, newFlagSet(c.name), args)
	if !ok {
		return code
	}
	if len(a.before)+len(a.after) > 0 {
		return fail(e, c.name, usageErrorf("no arguments expected"))
	}
	fmt.Fprintln(e.stdout, versionLine())
	return exitOK
}

// moduleVersion is the last release of the dlock modules: the version their
// tags got, which the modules require of each other.
const moduleVersion = "v0.1.0"

// nextRelease is the release this source tree leads to once anything changed
// past moduleVersion's tag (CHANGELOG.md's Unreleased section is not empty),
// else "". A build from a checkout calls itself nextRelease-dev.
const nextRelease = "v0.2.0"

// commit is the commit of a build that git did not stamp (go build
// -buildvcs=false -ldflags "-X main.commit=$(git rev-parse HEAD)").
var commit string

// pseudoVersion matches a pseudo-version's time and commit, and a stamped
// build's "+dirty".
var pseudoVersion = regexp.MustCompile(`(?:^|[-.])(\d{14})-([0-9a-f]{12})(\+dirty)?$`)

// devVersion is the version a build from this source tree calls itself.
func devVersion() string {
	if nextRelease == "" {
		return moduleVersion
	}
	return nextRelease + "-dev"
}

// versionLine describes this build (see describeBuild).
func versionLine() string {
	bi, _ := debug.ReadBuildInfo()
	return describeBuild(bi, commit)
}

// describeBuild describes a build: "dlock v0.2.0-dev (commit 0123456789ab,
// 2026-01-02T03:04:05Z, modified) go1.26.0". The version is a tagged
// release's, else devVersion; the commit is the one git stamped, else the one
// a pseudo-version names, else rev (given at link time), else unknown. bi may
// be nil.
func describeBuild(bi *debug.BuildInfo, rev string) string {
	version, goVersion := devVersion(), runtime.Version()
	var at string
	var modified bool
	if bi != nil {
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		v := bi.Main.Version
		if m := pseudoVersion.FindStringSubmatch(v); m != nil {
			// A build at a commit that is no release: go build in a
			// checkout, or go install ...@main.
			rev, modified = m[2], m[3] != ""
			if t, err := time.Parse("20060102150405", m[1]); err == nil {
				at = t.Format(time.RFC3339)
			}
		} else if strings.HasPrefix(v, "v") {
			version, rev = strings.TrimSuffix(v, "+dirty"), "tag cmd/dlock/"+strings.TrimSuffix(v, "+dirty")
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	var what []string
	switch {
	case rev == "":
		what = append(what, "commit unknown: built without VCS stamping")
	case strings.HasPrefix(rev, "tag "):
		what = append(what, rev)
	default:
		what = append(what, "commit "+rev[:min(len(rev), 12)])
	}
	if at != "" {
		what = append(what, at)
	}
	if modified {
		what = append(what, "modified")
	}
	return "dlock " + version + " (" + strings.Join(what, ", ") + ") " + goVersion
}
