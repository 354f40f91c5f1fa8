package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

func versionCommand() command {
	return command{
		name: "version", summary: "print dlock's version, commit and Go version",
		synopsis: "dlock version",
		help: `Prints the module version dlock was built from (for a build from a checkout,
the release the checkout belongs to, marked "devel"), the commit, its time and whether the tree was modified, when the
build recorded them, and the Go version. "dlock --version" does the same.

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

// moduleVersion is the version of the dlock modules this source tree is: the
// release it was tagged as, or the release it leads to while unreleased. A
// build from a checkout, which has no module version of its own, reports it.
const moduleVersion = "v0.1.0"

// versionLine describes this build (see describeBuild).
func versionLine() string {
	bi, _ := debug.ReadBuildInfo()
	return describeBuild(bi)
}

// describeBuild describes a build: "dlock v1.2.0 (commit 0123456789ab,
// 2026-01-02T03:04:05Z, modified) go1.26.0"; a build from a checkout says
// "devel" after moduleVersion. bi may be nil.
func describeBuild(bi *debug.BuildInfo) string {
	version, goVersion := moduleVersion, runtime.Version()
	vcs := []string{"devel"}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version, vcs = v, nil
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		var rev, at string
		var modified bool
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
		if rev != "" {
			vcs = append(vcs, "commit "+rev[:min(len(rev), 12)])
		}
		if at != "" {
			vcs = append(vcs, at)
		}
		if modified {
			vcs = append(vcs, "modified")
		}
	}
	line := "dlock " + version
	if len(vcs) > 0 {
		line += " (" + strings.Join(vcs, ", ") + ")"
	}
	return line + " " + goVersion
}
