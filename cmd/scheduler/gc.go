package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/rodon-compute/rodon/internal/size"
)

// defaultGCPercent is --gc-percent's default. A member allocates mostly
// short-lived garbage per request and per entry (decoded commands, HTTP
// bodies) over a live heap of its state; at Go's default of 100 the
// collector took about a fifth of a member's CPU in bench/fleet, at 400
// it takes far less for a heap at most five times the live one
// (docs/BENCHMARKS.md, "Scheduler throughput (issue 14)").
const defaultGCPercent = 400

// gcFlags tune the Go garbage collector of `scheduler serve`. They are
// the process's, not a Server's, so they live in main.
type gcFlags struct {
	percent     int
	memoryLimit sizeFlag
}

// sizeFlag is a byte size flag ("512Mi", "1GiB").
type sizeFlag = size.Flag

func (g *gcFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&g.percent, "gc-percent", defaultGCPercent, "the garbage collector's target, as GOGC: heap growth in percent "+
		"of the live heap that starts a collection (-1 turns it off; then set --memory-limit); "+
		"without this flag a GOGC in the environment is kept")
	fs.Var(&g.memoryLimit, "memory-limit", "a soft limit of the member's memory, as GOMEMLIMIT (a size such as 2Gi): "+
		"the collector runs more often near it (0, the default, is no limit unless GOMEMLIMIT sets one)")
}

// check reports a flag out of its range.
func (g *gcFlags) check() error {
	switch {
	case g.percent < -1:
		return fmt.Errorf("--gc-percent %d: want -1 (off) or more", g.percent)
	case g.percent == -1 && g.memoryLimit == 0 && os.Getenv("GOMEMLIMIT") == "":
		return fmt.Errorf("--gc-percent -1 turns the collector off: set --memory-limit too, or the heap grows without bound")
	}
	return nil
}

// apply sets the collector's target and memory limit from the flags set
// in fs: a flag left at its default keeps what GOGC or GOMEMLIMIT in the
// environment set, else --gc-percent's default applies.
func (g *gcFlags) apply(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["gc-percent"] || os.Getenv("GOGC") == "" {
		debug.SetGCPercent(g.percent)
	}
	if g.memoryLimit > 0 {
		debug.SetMemoryLimit(int64(g.memoryLimit))
	}
}
