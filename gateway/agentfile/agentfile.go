// Package agentfile reads agent files (SPEC.md, "Agents, grants, tools
// and gates"): agents/NAME.md in a workspace, YAML front matter between
// "---" lines, then the agent's instructions as Markdown. The parser is
// strict: an unknown key, a wrong type, a tool or image that does not
// exist, a limit out of bounds is an *Error naming the line and the field.
package agentfile

import (
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// MaxBytes bounds an agent file.
const MaxBytes = 64 << 10

// Default and maximum run lifetime (limits.run).
const (
	DefaultRun = time.Hour
	MaxRun     = 24 * time.Hour
)

// File is a parsed agent file, defaults filled in.
type File struct {
	Name        string
	Description string
	Tools       []string // api.Tool* names, in the file's order, no repeats
	Secrets     []string // environment variable names
	Network     string   // "internet" or "none"; default "internet"
	Image       string   // a step image ("base", "python"); default "base"
	Limits      api.AgentLimits
	Gates       []string // gated tools (only api.ToolApplyChange may be gated)
	// Body is the Markdown after the front matter.
	Body string
}

// Has reports whether the file grants tool.
func (f *File) Has(tool string) bool {
	for _, t := range f.Tools {
		if t == tool {
			return true
		}
	}
	return false
}

// Error is a problem with an agent file: the line (1-based, of the whole
// file) and the field ("tools[2]", "limits.memory") it is at, when known.
type Error struct {
	Line    int
	Field   string
	Message string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Field != "":
		return fmt.Sprintf("line %d: field %q: %s", e.Line, e.Field, e.Message)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Message)
	case e.Field != "":
		return fmt.Sprintf("field %q: %s", e.Field, e.Message)
	}
	return e.Message
}

// Path is the workspace path of agent name's file.
func Path(name string) string { return "agents/" + name + ".md" }
