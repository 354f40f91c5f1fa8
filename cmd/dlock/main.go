// Command dlock runs commands under distributed locks and shows what locking
// protects against.
//
//	dlock demo [--redis URL] [--workers N] [--rounds N]
//
// Run "dlock help" for the subcommands and their flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes shared by every subcommand (sysexits.h).
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 64 // EX_USAGE: bad flags or arguments
	exitUnavailable = 69 // EX_UNAVAILABLE: the lock server cannot be reached
)

// command is one subcommand: it parses its own flags and runs.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

// env is what a subcommand may touch: no global state.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

func commands() []command {
	return []command{
		{"demo", "show lost updates without a lock and none with dlock (embedded Redis unless --redis)", runDemo},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(e.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "dlock: unknown command %q\n", args[0])
	usage(e.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dlock COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun \"dlock COMMAND -h\" for a command's flags.")
}
