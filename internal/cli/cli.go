// Package cli is what the daemons' mains (cmd/agentd, cmd/scheduler,
// cmd/gateway) and schedctl share: command dispatch with Rodon's exit statuses,
// strict flag parsing, interrupts that end a command's context,
// and the JSON logger every daemon writes to stderr.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ErrUsage marks a command-line error: the message is printed with the
// command's name and the program exits ExitUsage.
var ErrUsage = errors.New("usage")

// Exit statuses of every binary: ExitError for a command that failed,
// ExitUsage for a command-line error.
const (
	ExitError = 1
	ExitUsage = 2
)

// Command runs one subcommand with its arguments. Its exit status is code
// when err is nil.
type Command func(args []string, stdout, stderr io.Writer) (code int, err error)

// Main dispatches args[0] to its command in cmds and returns the exit
// status: usage (to stdout) for -h, ExitUsage for an unknown command or an
// error wrapping ErrUsage, exitError for any other error.
func Main(name, usage string, cmds map[string]Command, exitError int, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n%s", name, args[0], usage)
		return ExitUsage
	}
	code, err := cmd(args[1:], stdout, stderr)
	switch {
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "%s %s: %s\n", name, args[0], strings.TrimPrefix(err.Error(), "usage: "))
		return ExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "%s %s: %v\n", name, args[0], err)
		return exitError
	}
	return code
}

// Parse parses args into fs (made with flag.ContinueOnError); a bad flag
// or -h is an ErrUsage error.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return fmt.Errorf("%w: help requested", ErrUsage)
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return nil
}

// ParseFlagsOnly is Parse for a command that takes no arguments but flags.
func ParseFlagsOnly(fs *flag.FlagSet, args []string, cmd string) error {
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q: %s takes only flags", ErrUsage, fs.Arg(0), cmd)
	}
	return nil
}

// Logger returns the JSON logger on w at level (debug, info, warn or
// error); a bad level is an ErrUsage error naming --log-level.
func Logger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", ErrUsage, level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}
