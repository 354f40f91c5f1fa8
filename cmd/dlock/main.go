// Command dlock runs commands under distributed locks, inspects and force-releases
// locks, and shows what locking protects against.
//
//	dlock run [flags] KEY -- COMMAND [ARGS...]
//	dlock status [flags] KEY
//	dlock list [flags] [PATTERN]
//	dlock unlock --force [flags] KEY
//	dlock lock --ttl DURATION [flags] KEY
//	dlock extend --ttl DURATION [flags] REF
//	dlock unlock [flags] REF
//	dlock latch count-down|wait|count --count N [flags] NAME
//	dlock barrier --parties N [flags] NAME [-- COMMAND [ARGS...]]
//	dlock semaphore resize [flags] KEY N
//	dlock top [flags] [PATTERN]
//	dlock serve [--http 127.0.0.1:8080] [--allow-unlock] [flags] [PATTERN]
//	dlock demo [--redis URL] [--workers N] [--rounds N]
//	dlock verify --prefix PREFIX [--duration 30s] [flags]
//	dlock completion bash|zsh
//	dlock version
//
// Run "dlock help" for the subcommands and "dlock COMMAND --help" for their flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"golang.org/x/term"
)

// Exit codes shared by every subcommand (sysexits.h and the shell's conventions).
const (
	exitOK          = 0
	exitFailure     = 1   // status: the lock is free; unlock: nothing to remove; other failures
	exitUsage       = 64  // EX_USAGE: bad flags or arguments
	exitDataErr     = 65  // EX_DATAERR: the key holds data that is not a dlock lock
	exitUnavailable = 69  // EX_UNAVAILABLE: the lock server cannot be reached or failed
	exitNotObtained = 75  // EX_TEMPFAIL: run: not obtained within --wait (see -E)
	exitLockLost    = 76  // run: the lock was lost while the command ran
	exitNotExec     = 126 // run: the command is not executable
	exitNotFound    = 127 // run: the command was not found
)

// command is one subcommand: it parses its own flags and runs.
type command struct {
	name     string
	summary  string
	synopsis string               // one usage line
	help     string               // what it does, and examples
	flags    func() *flag.FlagSet // its flags, for help and completion; nil: none
	run      func(ctx context.Context, e *env, args []string) int
	signals  bool // it handles SIGINT/SIGTERM itself
}

// env is what a subcommand may touch: no global state.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stderrTTY      bool       // stderr is a terminal: progress may be shown there
	width          func() int // the columns of that terminal now; 0 when unknown
}

func commands() []command {
	return []command{
		runCommand(),
		statusCommand(),
		listCommand(),
		unlockCommand(),
		lockCommand(),
		extendCommand(),
		latchCommand(),
		barrierCommand(),
		semaphoreCommand(),
		topCommand(),
		serveCommand(),
		demoCommand(),
		verifyCommand(),
		completionCommand(),
		versionCommand(),
	}
}

func main() {
	// A write to a closed pipe returns EPIPE instead of killing dlock, so that a
	// held lock is still released; children get the default disposition back.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// go-redis logs connection failures on its own; dlock reports them once.
	redis.SetLogger(quietLogger{})
	// The library logs a wait through failures once; dlock run says it
	// itself, on its own lines.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	e := &env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		stderrTTY: term.IsTerminal(int(os.Stderr.Fd())),
		width: func() int {
			w, _, err := term.GetSize(int(os.Stderr.Fd()))
			if err != nil {
				return 0
			}
			return w
		},
	}
	os.Exit(run(context.Background(), e, os.Args[1:]))
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "--version", "-version":
		return runVersion(ctx, e, nil)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := lookup(args[1]); ok {
				return c.run(ctx, e, []string{"--help"})
			}
		}
		usage(e.stdout)
		return exitOK
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(e.stderr, "dlock: unknown command %q%s\n", maskURL(args[0]), commandHint(args))
		fmt.Fprintln(e.stderr, "Run 'dlock --help' for usage.")
		return exitUsage
	}
	if !c.signals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	return c.run(ctx, e, args[1:])
}

// commandHint returns what follows "unknown command" for args, whose first
// is not a command: where flags go when it is a flag, the command meant when
// it is a near miss of one, else "".
func commandHint(args []string) string {
	if strings.HasPrefix(args[0], "-") {
		for i, a := range args {
			if a == "--" {
				break
			}
			if c, ok := lookup(a); ok {
				flags := make([]string, i)
				for j, f := range args[:i] {
					flags[j] = printable(maskURL(f))
				}
				return ": flags go after the command name: dlock " + c.name + " " + strings.Join(flags, " ") + " ..."
			}
		}
		hint := ": flags go after the command name (dlock COMMAND [flags] [args])"
		if len(args) == 1 && (args[0] == "-v" || args[0] == "-V") {
			hint += "; dlock --version prints the version"
		}
		return hint
	}
	best, bestD := "", 0
	for _, c := range commands() {
		d := editDistance(strings.ToLower(args[0]), c.name)
		// One edit in any name, two in a name of five letters or more.
		if (d <= 1 || d == 2 && len(c.name) >= 5) && (best == "" || d < bestD) {
			best, bestD = c.name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(": did you mean %q?", best)
}

// editDistance is the number of insertions, deletions, substitutions and
// swaps of two neighbours that turn a into b (optimal string alignment).
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dlock COMMAND [flags] [args]   (dlock --version: the version)")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nservers (one backend; repeat the flag for several servers):")
	for _, b := range backends() {
		fmt.Fprintf(w, "  %-18s or $%s: %s\n", "--"+b.flag+" "+b.metavar, strings.Join(b.env, ", else $"), b.brief)
	}
	fmt.Fprintln(w, "  --tls-ca, --tls-cert, --tls-key FILE   or $DLOCK_TLS_CA, $DLOCK_TLS_CERT, $DLOCK_TLS_KEY")
	fmt.Fprintln(w, "\nexamples:")
	fmt.Fprintln(w, "  dlock run --redis redis://127.0.0.1:6379/0 nightly-report -- ./report.sh")
	fmt.Fprintln(w, "  dlock status nightly-report")
	fmt.Fprintln(w, "\nRun \"dlock COMMAND --help\" for a command's flags and examples.")
}
