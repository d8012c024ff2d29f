// Package grammartest is the one table of size and id strings that every
// way into Rodon must read alike: schedctl's flags, agentd's flags, the
// scheduler's API and the gateway's run requests. Each of those packages
// has a test that feeds the table to its own parsing through Run, so that
// all of them give the same answer for each string: the same value, or an
// error carrying the same sentence of the grammar (internal/size,
// cluster/ids.go). This package's own test checks the table against the
// grammar itself and a real in-process scheduler's HTTP API.
package grammartest

import (
	"fmt"
	"strings"
	"testing"
)

// Kind is what a string of the table is read as.
type Kind string

// The kinds of the table.
const (
	Size        Kind = "size"
	StepID      Kind = "step id"
	NodeID      Kind = "node id"
	WorkspaceID Kind = "workspace id"
	// Name is a member id, a gateway's or an operator's name.
	Name Kind = "name"
)

// Case is one string and the answer every entry point must give for it.
type Case struct {
	Kind  Kind
	Input string
	// Bytes is a size's value.
	Bytes int64
	// Err, when not empty, is the grammar's refusal, which every entry
	// point's error must contain.
	Err string
}

// Accepted reports whether the case is a string the grammar takes.
func (c Case) Accepted() bool { return c.Err == "" }

func sizeErr(s string) string {
	return fmt.Sprintf("size %q: want a number with an optional unit: k, m, g, t or Ki, Mi, Gi, Ti (powers of 1024), K, M, G, T (powers of 1000), such as 512m, 512Mi or 1G", s)
}

func stepErr(kind, s string) string {
	return fmt.Sprintf("%s %q: want 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit", kind, s)
}

func wsErr(s string) string {
	return fmt.Sprintf("workspace id %q: want ws- and then 1-60 characters of a-z, 0-9, '-' and '_'", s)
}

func nameErr(kind, s string) string {
	return fmt.Sprintf("%s %q: want 1-63 characters of a-z, 0-9, '.', '-' and '_', starting with a letter or digit", kind, s)
}

// Cases is the table. Every accepted size is within the bounds of every
// field the entry points feed it to (a step's memory: 16 MiB to 256 GiB),
// so that only the grammar decides.
var Cases = []Case{
	{Kind: Size, Input: "512m", Bytes: 512 << 20},
	{Kind: Size, Input: "512Mi", Bytes: 512 << 20},
	{Kind: Size, Input: "512MiB", Bytes: 512 << 20},
	{Kind: Size, Input: "64mb", Bytes: 64 << 20},
	{Kind: Size, Input: "1g", Bytes: 1 << 30},
	{Kind: Size, Input: "1Gi", Bytes: 1 << 30},
	{Kind: Size, Input: "1gib", Bytes: 1 << 30},
	{Kind: Size, Input: "1G", Bytes: 1e9},
	{Kind: Size, Input: "2GB", Bytes: 2e9},
	{Kind: Size, Input: "100M", Bytes: 100e6},
	{Kind: Size, Input: "20000K", Bytes: 20e6},
	{Kind: Size, Input: "65536k", Bytes: 64 << 20},
	{Kind: Size, Input: "1.5g", Bytes: 3 << 29},
	{Kind: Size, Input: "0.25Ti", Bytes: 1 << 38},
	{Kind: Size, Input: "20000000", Bytes: 20e6},
	{Kind: Size, Input: "20000000B", Bytes: 20e6},
	{Kind: Size, Input: "1Mb", Err: sizeErr("1Mb")},
	{Kind: Size, Input: "1MIB", Err: sizeErr("1MIB")},
	{Kind: Size, Input: "64mi", Err: sizeErr("64mi")},
	{Kind: Size, Input: "1 g", Err: sizeErr("1 g")},
	{Kind: Size, Input: "-1g", Err: sizeErr("-1g")},
	{Kind: Size, Input: "+1g", Err: sizeErr("+1g")},
	{Kind: Size, Input: "1e9", Err: sizeErr("1e9")},
	{Kind: Size, Input: "0x20m", Err: sizeErr("0x20m")},
	{Kind: Size, Input: ".5g", Err: sizeErr(".5g")},
	{Kind: Size, Input: "lots", Err: sizeErr("lots")},
	{Kind: Size, Input: "1E", Err: sizeErr("1E")},
	{Kind: Size, Input: "9999999P", Err: `size "9999999P": too large`},

	{Kind: StepID, Input: "run-1a2b3c"},
	{Kind: StepID, Input: "a"},
	{Kind: StepID, Input: "0_step-x"},
	{Kind: StepID, Input: strings.Repeat("s", 63)},
	{Kind: StepID, Input: strings.Repeat("s", 64), Err: stepErr("step id", strings.Repeat("s", 64))},
	{Kind: StepID, Input: "Step", Err: stepErr("step id", "Step")},
	{Kind: StepID, Input: "-step", Err: stepErr("step id", "-step")},
	{Kind: StepID, Input: "_step", Err: stepErr("step id", "_step")},
	{Kind: StepID, Input: "a.b", Err: stepErr("step id", "a.b")},
	{Kind: StepID, Input: "a/b", Err: stepErr("step id", "a/b")},
	{Kind: StepID, Input: "a b", Err: stepErr("step id", "a b")},
	{Kind: StepID, Input: "stép", Err: stepErr("step id", "stép")},

	{Kind: NodeID, Input: "n1"},
	{Kind: NodeID, Input: "node-7.rack_2"},
	{Kind: NodeID, Input: "host.example.org"},
	{Kind: NodeID, Input: strings.Repeat("n", 63)},
	{Kind: NodeID, Input: strings.Repeat("n", 64), Err: nameErr("node id", strings.Repeat("n", 64))},
	{Kind: NodeID, Input: "N1", Err: nameErr("node id", "N1")},
	{Kind: NodeID, Input: ".n1", Err: nameErr("node id", ".n1")},
	{Kind: NodeID, Input: "-n1", Err: nameErr("node id", "-n1")},
	{Kind: NodeID, Input: "n/1", Err: nameErr("node id", "n/1")},
	{Kind: NodeID, Input: "n 1", Err: nameErr("node id", "n 1")},

	{Kind: WorkspaceID, Input: "ws-main"},
	{Kind: WorkspaceID, Input: "ws-data_1"},
	{Kind: WorkspaceID, Input: "ws-" + strings.Repeat("w", 60)},
	{Kind: WorkspaceID, Input: "ws-" + strings.Repeat("w", 61), Err: wsErr("ws-" + strings.Repeat("w", 61))},
	{Kind: WorkspaceID, Input: "data_1", Err: wsErr("data_1")},
	{Kind: WorkspaceID, Input: "..", Err: wsErr("..")},
	{Kind: WorkspaceID, Input: "ws-a.b", Err: wsErr("ws-a.b")},
	{Kind: WorkspaceID, Input: "/etc", Err: wsErr("/etc")},
	{Kind: WorkspaceID, Input: "ws-Main", Err: wsErr("ws-Main")},

	{Kind: Name, Input: "gw1"},
	{Kind: Name, Input: "gateway.eu-1"},
	{Kind: Name, Input: "GW", Err: nameErr("NAME", "GW")},
	{Kind: Name, Input: "g w", Err: nameErr("NAME", "g w")},
}

// Entry is one way in: for each kind it takes, how to feed it a string.
// The function returns the bytes read (sizes; 0 for ids) or the error the
// entry point answers; for a string the grammar takes, any error it
// returns must not be the grammar's.
type Entry map[Kind]func(t *testing.T, s string) (int64, error)

// Run feeds every case of a kind the entry takes to it and checks the
// answer against the table. For Name, Err names the kind "NAME": an
// entry's error must carry the sentence after the kind.
func Run(t *testing.T, e Entry) {
	t.Helper()
	for _, c := range Cases {
		feed, ok := e[c.Kind]
		if !ok {
			continue
		}
		t.Run(string(c.Kind)+"/"+c.Input, func(t *testing.T) {
			got, err := feed(t, c.Input)
			switch {
			case c.Accepted() && err != nil:
				t.Errorf("%s %q: %v; want it taken", c.Kind, c.Input, err)
			case c.Accepted() && got != c.Bytes:
				t.Errorf("%s %q = %d bytes; want %d", c.Kind, c.Input, got, c.Bytes)
			case !c.Accepted() && err == nil:
				t.Errorf("%s %q = %d, nil; want an error with %q", c.Kind, c.Input, got, c.Err)
			case !c.Accepted() && !strings.Contains(err.Error(), c.sentence()):
				t.Errorf("%s %q: error %q; want it to contain %q", c.Kind, c.Input, err, c.sentence())
			}
		})
	}
}

// sentence is the part of Err every entry point's error contains: for
// names, from the quoted input on (each entry names its kind: "member
// id", "gateway name", "name").
func (c Case) sentence() string {
	if c.Kind == Name {
		_, rest, _ := strings.Cut(c.Err, " ")
		return rest
	}
	return c.Err
}
