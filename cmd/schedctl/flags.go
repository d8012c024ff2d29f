package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rodon-compute/rodon/cluster"
	icli "github.com/rodon-compute/rodon/internal/cli"
)

// globalFlags are the flags every command takes, before or after its name.
type globalFlags struct {
	// addr is the scheduler's address, or a comma-separated list of
	// members; empty means $RODON_SCHEDULER, then defaultAddr.
	addr string
	// output is "" (tables and sentences) or "json".
	output string
	// tls are the TLS flags; tls.Dir empty means $RODON_TLS_DIR, then
	// icli.DefaultTLSDir.
	tls icli.TLSFlags
}

// register adds the global flags to fs with their current values as
// defaults, so that flags given before the command name stand.
func (g *globalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "scheduler URL, or comma-separated member URLs; a bare HOST:PORT is https "+
		"(default $RODON_SCHEDULER or "+defaultAddr+"; "+defaultPlainAddr+" with --plaintext)")
	fs.StringVar(&g.output, "o", g.output, "output format: text or json")
	fs.StringVar(&g.tls.Dir, "tls-dir", g.tls.Dir, "directory of the cluster CA (ca.crt) and the one operator-NAME.crt and .key to use "+
		"(default $RODON_TLS_DIR or "+icli.DefaultTLSDir+")")
	fs.StringVar(&g.tls.CA, "tls-ca", g.tls.CA, "cluster CA certificate (default TLS-DIR/ca.crt)")
	fs.StringVar(&g.tls.Cert, "tls-cert", g.tls.Cert, "operator certificate (default the one TLS-DIR/operator-*.crt)")
	fs.StringVar(&g.tls.Key, "tls-key", g.tls.Key, "private key of --tls-cert (default beside it)")
	fs.BoolVar(&g.tls.Plaintext, "plaintext", g.tls.Plaintext, "plain HTTP, no certificate: for a scheduler started with --plaintext on loopback")
}

// parseLeading parses the global flags given before the command name and
// returns the rest of the arguments.
func (g *globalFlags) parseLeading(args []string) ([]string, error) {
	fs := newFlagSet("schedctl")
	g.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return fs.Args(), g.check()
}

// check validates the values of the global flags.
func (g *globalFlags) check() error {
	switch g.output {
	case "", "text", "json":
	default:
		return fmt.Errorf("%w: -o %q: want text or json", errUsage, g.output)
	}
	if g.tls.Plaintext && (g.tls.CA != "" || g.tls.Cert != "" || g.tls.Key != "") {
		return fmt.Errorf("%w: --plaintext and --tls-cert/--tls-key/--tls-ca are exclusive", errUsage)
	}
	if g.tls.Key != "" && g.tls.Cert == "" {
		return fmt.Errorf("%w: --tls-key needs --tls-cert", errUsage)
	}
	return nil
}

// json reports whether the user asked for JSON output.
func (g *globalFlags) json() bool { return g.output == "json" }

// newFlagSet returns a flag set that prints nothing itself: its errors come
// back from parseFlags wrapped in errUsage.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// errHelp is returned when the user asked for a command's flags.
var errHelp = fmt.Errorf("%w: help requested", errUsage)

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return errHelp
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments (schedctl node drain ID --deadline 10m) and
// returns the positional arguments. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments; names are their
// names for the message, such as "ID".
func wantArgs(args []string, names ...string) error {
	switch {
	case len(args) < len(names):
		return fmt.Errorf("%w: missing %s", errUsage, strings.Join(names[len(args):], " "))
	case len(args) > len(names):
		return fmt.Errorf("%w: unexpected argument %q", errUsage, args[len(names)])
	}
	for i, a := range args {
		if a == "" {
			return fmt.Errorf("%w: empty %s", errUsage, names[i])
		}
	}
	return nil
}

// wantStepID checks that the one positional argument is a step id
// (cluster.ValidateStepID); wantNodeID that it is a node id.
func wantStepID(args []string) error {
	if err := wantArgs(args, "ID"); err != nil {
		return err
	}
	if err := cluster.ValidateStepID(cluster.StepID(args[0])); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

func wantNodeID(args []string) error {
	if err := wantArgs(args, "ID"); err != nil {
		return err
	}
	if err := cluster.ValidateNodeID(cluster.NodeID(args[0])); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}
