package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// exitError is an error that decides dlock's exit code. Its message is printed
// after "dlock COMMAND: ", on one line.
type exitError struct {
	code int
	msg  string
	err  error // the cause, when errors.Is should still find it
}

func (e *exitError) Error() string { return e.msg }

func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

func unavailableErrorf(format string, args ...any) error {
	return &exitError{code: exitUnavailable, msg: fmt.Sprintf(format, args...)}
}

// exitCode maps an error to dlock's exit code.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, dlock.ErrInvalid):
		return exitUsage
	case errors.Is(err, dlock.ErrConflict):
		return exitDataErr
	case errors.Is(err, dlock.ErrUnavailable):
		return exitUnavailable
	}
	return exitFailure
}

// fail prints err as one line (plus a usage hint for usage errors) and returns
// its exit code.
func fail(e *env, cmd string, err error) int {
	code := exitCode(err)
	msg := strings.TrimPrefix(oneLine(err), "dlock: ")
	fmt.Fprintf(e.stderr, "dlock %s: %s\n", cmd, msg)
	if code == exitUsage {
		fmt.Fprintf(e.stderr, "Run 'dlock %s --help' for usage.\n", cmd)
	}
	return code
}

// oneLine returns err's message on one line: the lines of joined errors
// (errors.Join) are joined with "; ", each distinct line once.
func oneLine(err error) string {
	lines := strings.Split(err.Error(), "\n")
	seen := make(map[string]bool, len(lines))
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// newFlagSet returns a flag set that reports errors to its caller only.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs (see splitArgs). ok is false, with the exit
// code, when the command should stop: after --help (exit 0) or a bad flag
// (exit 64).
func parseFlags(e *env, c command, fs *flag.FlagSet, args []string) (a parsedArgs, code int, ok bool) {
	a, err := splitArgs(fs, args)
	return a, flagError(e, c, fs, err), err == nil
}

// flagError reports an error of splitArgs and returns the exit code.
func flagError(e *env, c command, fs *flag.FlagSet, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		printHelp(e.stdout, c, fs)
		return exitOK
	}
	return fail(e, c.name, usageErrorf("%s", longFlags(err.Error())))
}

// splitArgs parses args into fs, with flags allowed among the arguments up to
// a "--", and returns the other arguments. On an error it returns those seen
// so far.
func splitArgs(fs *flag.FlagSet, args []string) (parsedArgs, error) {
	var a parsedArgs
	for {
		if err := fs.Parse(args); err != nil {
			return a, err
		}
		rest := fs.Args()
		if consumedTerminator(args, rest) {
			a.dashdash, a.after = true, rest
			return a, nil
		}
		if len(rest) == 0 {
			return a, nil
		}
		a.before = append(a.before, rest[0])
		args = rest[1:]
	}
}

// parsedArgs are the arguments left after the flags.
type parsedArgs struct {
	before   []string // the arguments before "--"
	dashdash bool     // whether there was a "--"
	after    []string // the arguments after it
}

// consumedTerminator reports whether parsing args left rest right after a "--"
// that the flag package consumed.
func consumedTerminator(args, rest []string) bool {
	i := len(args) - len(rest) - 1
	return i >= 0 && args[i] == "--"
}

// longFlags rewrites the flag package's "-name" as "--name", the spelling of
// the help, for every flag name longer than one letter.
func longFlags(msg string) string {
	return singleDashFlag.ReplaceAllString(msg, "$1--$2")
}

var singleDashFlag = regexp.MustCompile(`(^|[\s:])-([A-Za-z][A-Za-z0-9-]+)`)

// printHelp writes a command's usage, description, flags and examples.
func printHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", c.synopsis, strings.TrimSpace(c.help))
	if fs == nil {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			return // a hidden flag (dlock verify's --worker)
		}
		name, use := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		left := dash + f.Name
		if name != "" {
			left += " " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "0s" && f.DefValue != "false" && f.DefValue != "[]" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  %-28s %s%s\n", left, use, def)
	})
}

// durationFlag is a duration flag with bounds and clear errors for values that
// do not parse or make no sense.
type durationFlag struct {
	d       time.Duration
	set     bool
	min     time.Duration
	max     time.Duration
	wholeMS bool   // reject fractions of a millisecond
	zero    string // when non-empty, 0 is allowed and means this
	def     string // the default, as shown in help
}

func (f *durationFlag) String() string {
	if f == nil {
		return ""
	}
	if !f.set && f.def != "" {
		return f.def
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	switch {
	case d < 0:
		return errors.New("must not be negative")
	case d == 0 && f.zero != "":
	case d < f.min:
		return fmt.Errorf("below the minimum %v", f.min)
	case f.max > 0 && d > f.max:
		return fmt.Errorf("above the maximum %v", f.max)
	case f.wholeMS && d%time.Millisecond != 0:
		return fmt.Errorf("not a whole number of milliseconds (the server keeps milliseconds): write %v", d.Round(time.Millisecond))
	}
	f.d, f.set = d, true
	return nil
}

// parseDuration parses Go duration syntax and explains the usual mistakes.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("missing unit: write %ss or %sms", s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration, or out of range (Go syntax: 500ms, 2s, 1m30s, 2h)")
	}
	return d, nil
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (f *stringsFlag) String() string {
	if f == nil || len(*f) == 0 {
		return ""
	}
	return strings.Join(*f, ",")
}

func (f *stringsFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty value")
	}
	*f = append(*f, s)
	return nil
}

// exitCodeFlag is a flag whose value is an exit code, 0..255.
type exitCodeFlag int

func (f *exitCodeFlag) String() string {
	if f == nil {
		return "0"
	}
	return strconv.Itoa(int(*f))
}

// Set reads an exit code, saying what is expected when s is none.
func (f *exitCodeFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 255 {
		return fmt.Errorf("not an exit code: want a whole number 0..255 (e.g. 0 to count a lock not obtained as success, 75 the default)")
	}
	*f = exitCodeFlag(n)
	return nil
}
