// Command dlock runs commands under distributed locks, inspects and force-releases
// locks, and shows what locking protects against.
//
//	dlock run [flags] KEY -- COMMAND [ARGS...]
//	dlock status [flags] KEY
//	dlock list [flags] [PATTERN]
//	dlock unlock --force [flags] KEY
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
		fmt.Fprintf(e.stderr, "dlock: unknown command %q\n", args[0])
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
	fmt.Fprintln(w, "  --redis URL        or $DLOCK_REDIS, else $REDIS_URL: redis://[user:pass@]host:port/db, rediss:// for TLS")
	fmt.Fprintln(w, "  --etcd URL         or $DLOCK_ETCD: http://host:2379, https:// for TLS")
	fmt.Fprintln(w, "  --zk HOST:PORT     or $DLOCK_ZK: a ZooKeeper server")
	fmt.Fprintln(w, "  --tls-ca, --tls-cert, --tls-key FILE   or $DLOCK_TLS_CA, $DLOCK_TLS_CERT, $DLOCK_TLS_KEY")
	fmt.Fprintln(w, "\nexamples:")
	fmt.Fprintln(w, "  dlock run --redis redis://127.0.0.1:6379/0 nightly-report -- ./report.sh")
	fmt.Fprintln(w, "  dlock status nightly-report")
	fmt.Fprintln(w, "\nRun \"dlock COMMAND --help\" for a command's flags and examples.")
}
