// Command schedctl is the operator CLI of Rodon's scheduler: it lists and
// manages members, nodes and steps, runs a step and streams its output, and
// cancels steps, all through the scheduler's public HTTP API (see
// docs/PROTOCOL.md). Every listing takes -o json.
//
// Exit status: 0 ok, 1 error, 2 usage; `schedctl run` exits with the step's
// own exit code (128+signal when a signal killed it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	icli "github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/stepfollow"
)

const usage = `usage: schedctl [--addr URL[,URL...]] [--tls-dir DIR | --plaintext] COMMAND [ARGS] [FLAGS]

Commands:
  members                        raft peers, leader, last index
  raft remove-peer ID            remove a member from the raft configuration
  snapshot save FILE             write the cluster's state to FILE
  snapshot restore FILE          replace the cluster's state with FILE
  nodes                          id, address, state, degraded reasons, capacity, running
  node drain ID [--deadline D]   stop placing on a node; cancel what still runs at D
  node undrain ID                let a drained node take steps again
  run [FLAGS] -- ARGV...         run a step, stream its output, exit with its code
  steps [--state S] [--node ID]  list steps
  step ID                        show a step: state, exit, cancel, phases, events
  logs [-f] ID                   print a step's output (-f: follow until it ends)
  cancel ID [--wait D]           cancel a step (--wait: until the node confirms)

The scheduler's address comes from --addr or $RODON_SCHEDULER (default
https://127.0.0.1:7100; a bare HOST:PORT is https); any member will do, and
a comma-separated list is tried in order. schedctl speaks mutual TLS with
the one operator certificate (operator-NAME.crt and .key, with ca.crt) in
--tls-dir, else $RODON_TLS_DIR, else /etc/rodon/tls, or with --tls-cert,
--tls-key and --tls-ca; get one with
  scheduler tls issue --role operator --name NAME --dir DIR
--plaintext (default address http://127.0.0.1:7100) is for a scheduler
started with --plaintext on loopback. Listings take -o json.
Run "schedctl COMMAND -h" for a command's flags.
`

// Exit statuses of schedctl itself; `run` passes the step's code through.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// defaultRetryFor is how long schedctl keeps trying while no member
// answers or the cluster elects a leader.
const defaultRetryFor = 10 * time.Second

// defaultAddr is the scheduler address when neither --addr nor
// $RODON_SCHEDULER is set; defaultPlainAddr with --plaintext.
const (
	defaultAddr      = "https://127.0.0.1:7100"
	defaultPlainAddr = "http://127.0.0.1:7100"
)

// errUsage marks a command-line error: schedctl prints the message and
// exits 2.
var errUsage = icli.ErrUsage

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// run is schedctl with its arguments, standard streams and environment.
// SIGINT and SIGTERM are routed to the command (see cli.interrupts) for
// as long as it runs.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr, env: env, interrupts: sigs, now: time.Now, retryFor: defaultRetryFor}
	return c.main(context.Background(), args)
}

// cli holds what every command shares: the standard streams, the
// environment and the interrupts the user sends.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            func(string) string
	// interrupts delivers SIGINT and SIGTERM. Most commands stop at the
	// first; `run` cancels its step at the first and detaches at the
	// second.
	interrupts <-chan os.Signal
	// g holds the global flags once parsed.
	g globalFlags
	// now is the clock tables show ages against.
	now func() time.Time
	// conn is how the cluster is reached; set up on first use (connect).
	conn *conn
	// retryFor is how long a request is retried while no member answers
	// or the cluster has no leader.
	retryFor time.Duration
	// stallGrace is how long a followed stream may stay silent once its
	// step ended (0: stepfollow.DefaultStallGrace). Tests shorten it.
	stallGrace time.Duration
}

// command is one schedctl command. Its flags are fields of the
// implementing struct; run gets the positional arguments and returns the
// exit status, or an error (wrapping errUsage for bad arguments).
type command interface {
	// synopsis is the usage line after "schedctl ".
	synopsis() string
	flags(fs *flag.FlagSet)
	run(ctx context.Context, c *cli, args []string) (int, error)
}

// argvCommand is a command whose flags end at its first positional
// argument (schedctl run [FLAGS] -- ARGV...); other commands accept flags
// anywhere.
type argvCommand interface {
	takesArgv()
}

// interruptHandler is a command that reads cli.interrupts itself; any
// other command's context ends at the first interrupt.
type interruptHandler interface {
	handlesInterrupts()
}

// commands maps names (and two-word names such as "node drain") to
// constructors of their implementations.
var commands = map[string]func() command{
	"members":          func() command { return &membersCmd{} },
	"raft remove-peer": func() command { return &removePeerCmd{} },
	"snapshot save":    func() command { return &snapshotSaveCmd{} },
	"snapshot restore": func() command { return &snapshotRestoreCmd{} },
	"nodes":            func() command { return &nodesCmd{} },
	"node drain":       func() command { return &drainCmd{} },
	"node undrain":     func() command { return &undrainCmd{} },
	"run":              func() command { return newRunCmd() },
	"steps":            func() command { return &stepsCmd{} },
	"step":             func() command { return &stepCmd{} },
	"logs":             func() command { return &logsCmd{} },
	"cancel":           func() command { return &cancelCmd{} },
}

// groups are the first words of two-word commands.
var groups = map[string]string{
	"raft":     "remove-peer",
	"snapshot": "save, restore",
	"node":     "drain, undrain",
}

func (c *cli) main(ctx context.Context, args []string) int {
	c.stdout = &lockedWriter{w: c.stdout}
	c.stderr = &lockedWriter{w: c.stderr}
	rest, err := c.g.parseLeading(args)
	if err != nil {
		if err == errHelp {
			fmt.Fprint(c.stdout, usage)
			return exitOK
		}
		return c.fail("", err)
	}
	if len(rest) == 0 {
		fmt.Fprint(c.stderr, usage)
		return exitUsage
	}
	name := rest[0]
	if name == "help" {
		fmt.Fprint(c.stdout, usage)
		return exitOK
	}
	rest = rest[1:]
	if subs, ok := groups[name]; ok {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return c.fail(name, fmt.Errorf("%w: want a subcommand: %s", errUsage, subs))
		}
		name += " " + rest[0]
		rest = rest[1:]
	}
	newCmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(c.stderr, "schedctl: unknown command %q\n%s", name, usage)
		return exitUsage
	}
	cmd := newCmd()
	fs := newFlagSet("schedctl " + name)
	c.g.register(fs)
	cmd.flags(fs)
	var pos []string
	if _, ok := cmd.(argvCommand); ok {
		err = parseFlags(fs, rest)
		pos = fs.Args()
	} else {
		pos, err = parseInterspersed(fs, rest)
	}
	if err == nil {
		err = c.g.check()
	}
	if err == errHelp {
		fmt.Fprintf(c.stdout, "usage: schedctl %s\n\nFlags:\n", cmd.synopsis())
		fs.SetOutput(c.stdout)
		fs.PrintDefaults()
		return exitOK
	}
	if err != nil {
		return c.fail(name, err)
	}
	if _, ok := cmd.(interruptHandler); ok {
		code, err := cmd.run(ctx, c, pos)
		return c.failCode(name, code, err)
	}
	ctx, release := c.interruptible(ctx)
	code, err := cmd.run(ctx, c, pos)
	return c.failCode(name, code, release(err))
}

// fail prints err and returns the exit status it means.
func (c *cli) fail(name string, err error) int { return c.failCode(name, exitError, err) }

func (c *cli) failCode(name string, code int, err error) int {
	prefix := "schedctl"
	if name != "" {
		prefix += " " + name
	}
	switch {
	case err == nil:
		return code
	case errors.Is(err, errUsage):
		msg := strings.TrimPrefix(err.Error(), "usage: ")
		fmt.Fprintf(c.stderr, "%s: %s\n", prefix, msg)
		if name != "" {
			fmt.Fprintf(c.stderr, "run \"schedctl %s -h\" for usage\n", name)
		}
		return exitUsage
	case errors.Is(err, errInterrupted):
		fmt.Fprintf(c.stderr, "%s: interrupted\n", prefix)
		return exitInterrupted
	}
	fmt.Fprintf(c.stderr, "%s: %v\n", prefix, err)
	var ue *url.Error
	switch {
	case stepfollow.IsTLSError(err):
		fmt.Fprintf(c.stderr, "check that --tls-dir holds a certificate of this cluster's CA and that the address is "+
			"the one meant (a scheduler member; for output, the step's node agent)\n")
	case errors.As(err, &ue) && !ue.Timeout():
		fmt.Fprintf(c.stderr, "check the address (--addr or $RODON_SCHEDULER) and that the server runs\n")
	}
	return exitError
}

// errInterrupted is returned by commands the user stopped with Ctrl-C.
var errInterrupted = icli.ErrInterrupted

// interruptible returns a context that ends at the user's first interrupt,
// and a function that releases it and returns errInterrupted if the
// interrupt came.
func (c *cli) interruptible(parent context.Context) (context.Context, func(err error) error) {
	return icli.Interruptible(parent, c.interrupts)
}
