package agentfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
)

const specExample = `---
name: analyst
description: Reads the datasets and writes charts
tools: [Read, Glob, Grep, Write, Edit, Bash, ApplyChange]
secrets: [MAPS_API_KEY]
network: internet            # or none
image: python
limits: {cpu: 1, memory: 1Gi, timeout: 10m, pids: 256, workspace: 1Gi}
gates:
  - tool: ApplyChange        # held only by the step after a person approves
---
You analyse data.
`

func TestParseSpecExample(t *testing.T) {
	f, err := Parse("analyst", []byte(specExample))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	want := &File{
		Name:        "analyst",
		Description: "Reads the datasets and writes charts",
		Tools:       []string{"Read", "Glob", "Grep", "Write", "Edit", "Bash", "ApplyChange"},
		Secrets:     []string{"MAPS_API_KEY"},
		Network:     "internet",
		Image:       "python",
		Limits: api.AgentLimits{CPU: 1, Memory: "1Gi", Timeout: api.Duration(10 * time.Minute), Pids: 256,
			Workspace: "1Gi", Run: api.Duration(DefaultRun)},
		Gates: []string{"ApplyChange"},
		Body:  "You analyse data.\n",
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

func TestParseDefaults(t *testing.T) {
	f, err := Parse("reader", []byte("---\nname: reader\ntools:\n  - Read\n---\n"))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	want := &File{
		Name: "reader", Tools: []string{"Read"}, Secrets: []string{}, Gates: []string{},
		Network: "internet", Image: "base",
		Limits: api.AgentLimits{CPU: 1, Memory: "512MiB", Timeout: api.Duration(time.Hour), Pids: 1024,
			Workspace: "1GiB", Run: api.Duration(time.Hour)},
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

func TestParseForms(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		check      func(*File) bool
	}{
		{"CRLF lines", "---\r\nname: a\r\ntools: [Read]\r\n---\r\nbody\r\n", func(f *File) bool { return f.Body == "body\r\n" }},
		{"fence with trailing blanks", "--- \nname: a\ntools: [Read]\n---\t\n", func(f *File) bool { return f.Name == "a" }},
		{"no newline after the closing fence", "---\nname: a\ntools: [Read]\n---", func(f *File) bool { return f.Body == "" }},
		{"a --- in the body", "---\nname: a\ntools: [Read]\n---\n---\nmore\n", func(f *File) bool { return f.Body == "---\nmore\n" }},
		{"quoted strings", "---\nname: \"a\"\ndescription: '42'\ntools: [\"Read\"]\n---\n", func(f *File) bool { return f.Description == "42" }},
		{"network none, image base", "---\nname: a\ntools: [Bash]\nnetwork: none\nimage: base\n---\n", func(f *File) bool { return f.Network == "none" && f.Image == "base" }},
		{"partial limits keep the other defaults", "---\nname: a\ntools: [Bash]\nlimits:\n  run: 10s\n  cpu: 0.5\n---\n",
			func(f *File) bool {
				return f.Limits.Run == api.Duration(10*time.Second) && f.Limits.CPU == 0.5 && f.Limits.Pids == 1024
			}},
		{"memory as bytes", "---\nname: a\ntools: [Bash]\nlimits: {memory: 1073741824, pids: 16}\n---\n", func(f *File) bool { return f.Limits.Memory == "1073741824" }},
		{"limits at the maxima", "---\nname: a\ntools: [Bash]\nlimits: {cpu: 64, memory: 256Gi, timeout: 24h, pids: 4096, workspace: 64Gi, run: 24h}\n---\n",
			func(f *File) bool { return f.Limits.Run == api.Duration(MaxRun) }},
		{"empty secrets and gates", "---\nname: a\ntools: [Read]\nsecrets: []\ngates: []\n---\n", func(f *File) bool { return len(f.Secrets) == 0 && f.Gates != nil }},
		{"comments", "---\n# an agent\nname: a # the name\ntools: [Read] # just that\n---\n", func(f *File) bool { return f.Name == "a" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("a", []byte(tc.file))
			if err != nil {
				t.Fatalf("Parse = %v", err)
			}
			if !tc.check(f) {
				t.Errorf("Parse = %+v: not what the case wants", f)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const tools = "Read, Glob, Grep, Write, Edit, Bash, ProposeChange, ApplyChange"
	for _, tc := range []struct {
		name  string
		file  string
		line  int
		field string
		msg   string // a part of the message
	}{
		// The front matter's shape.
		{"no front matter", "name: a\n", 1, "", "no front matter: an agent file starts with its front matter between two lines \"---\""},
		{"empty file", "", 1, "", "no front matter"},
		{"not closed", "---\nname: a\ntools: [Read]\n", 3, "", "the front matter opened at line 1 is not closed by a line \"---\""},
		{"empty front matter", "---\n---\nbody\n", 1, "", "the front matter is empty"},
		{"only comments", "---\n# nothing\n---\n", 1, "", "the front matter is empty"},
		{"a list, not a mapping", "---\n- name\n---\n", 2, "", "not a mapping of keys"},
		{"a scalar, not a mapping", "---\nhello\n---\n", 2, "", "not a mapping of keys"},
		{"an unclosed list", "---\nname: a\ntools: [Read\n---\n", 3, "", "not valid YAML: did not find expected ',' or ']'"},
		{"an unclosed mapping", "---\nname: a\ntools: [Read]\nlimits: {cpu: 1\n---\n", 4, "", "not valid YAML: did not find expected ',' or '}'"},
		{"a key at a bad indentation", "---\nname: a\ntools:\n  - Read\n - Grep\n---\n", 5, "", "not valid YAML"},
		{"an undefined tag handle", "---\nname: a\ntools: !x!y [Read]\n---\n", 3, "", "not valid YAML: found undefined tag handle"},
		{"a tag", "---\nname: !foo a\ntools: [Read]\n---\n", 2, "name", "want a string, got a value tagged !foo"},
		{"bad indentation", "---\nname: a\n  tools: [Read]\n---\n", 3, "", "not valid YAML: mapping values are not allowed"},
		{"a tab", "---\nname: a\n\ttools: [Read]\n---\n", 3, "", "not valid YAML"},

		// Keys.
		{"unknown key", "---\nname: a\ntools: [Read]\nmodel: opus\n---\n", 4, "model", "unknown key; want one of name, description, tools, secrets, network, image, limits, gates"},
		{"unknown key by case", "---\nname: a\nTools: [Read]\n---\n", 3, "Tools", "unknown key; did you mean tools?"},
		{"repeated key", "---\nname: a\ntools: [Read]\nname: a\n---\n", 4, "name", "repeated key (first at line 2)"},
		{"a number as a key", "---\nname: a\n1: x\n---\n", 3, "", "a key must be a plain word"},
		{"an anchored key", "---\n&k name: a\ntools: [Read]\n---\n", 2, "", "a key must be a plain word"},
		{"an alias as a key", "---\nname: &k a\n*k : x\n---\n", 2, "name", "anchors and aliases"},
		{"an anchor", "---\nname: &n a\ntools: [Read]\n---\n", 2, "name", "anchors and aliases"},
		{"an alias", "---\nname: a\ndescription: &d x\ntools: [Read]\n---\n", 3, "description", "anchors and aliases"},
		{"an alias in a list", "---\nname: &n a\ntools: [*n]\n---\n", 2, "name", "anchors and aliases"},

		// name.
		{"no name", "---\ntools: [Read]\n---\n", 1, "name", "required: the agent's name (name: a)"},
		{"another name", "---\nname: b\ntools: [Read]\n---\n", 2, "name", `"b": the file agents/a.md must be named a`},
		{"a bad name", "---\nname: A_b\ntools: [Read]\n---\n", 2, "name", `agent name "A_b": want 1-63 characters of a-z, 0-9 and '-'`},
		{"a name too long", "---\nname: " + strings.Repeat("a", 64) + "\ntools: [Read]\n---\n", 2, "name", "want 1-63 characters"},
		{"a name not a string", "---\nname: [a]\ntools: [Read]\n---\n", 2, "name", "want a string, got a list"},
		{"a number as name", "---\nname: 42\ntools: [Read]\n---\n", 2, "name", "want a string, got a number (quote it if it is one)"},
		{"an empty name", "---\nname:\ntools: [Read]\n---\n", 2, "name", "want a string, got nothing"},
		{"description not a string", "---\nname: a\ndescription: {x: 1}\ntools: [Read]\n---\n", 3, "description", "want a string, got a mapping"},

		// tools.
		{"no tools", "---\nname: a\n---\n", 1, "tools", "required: at least one tool of " + tools},
		{"empty tools", "---\nname: a\ntools: []\n---\n", 3, "tools", "want at least one tool of " + tools},
		{"tools not a list", "---\nname: a\ntools: Read\n---\n", 3, "tools", "want a list, such as [Read, Grep]; got \"Read\""},
		{"unknown tool", "---\nname: a\ntools: [Read, Glob, WebFetch]\n---\n", 3, "tools[2]", `unknown tool "WebFetch": want one of ` + tools},
		{"a tool by case", "---\nname: a\ntools:\n  - Glob\n  - read\n---\n", 5, "tools[1]", `unknown tool "read": did you mean Read? want one of ` + tools},
		{"a repeated tool", "---\nname: a\ntools:\n  - Read\n  - Grep\n  - Read\n---\n", 6, "tools[2]", "Read repeats tools[0]"},
		{"a tool not a string", "---\nname: a\ntools: [Read, [Bash]]\n---\n", 3, "tools[1]", "want a string, got a list"},
		{"a tool a boolean", "---\nname: a\ntools:\n  - true\n---\n", 4, "tools[0]", "want a string, got a boolean"},

		// secrets.
		{"a bad secret", "---\nname: a\ntools: [Bash]\nsecrets: [MAPS_API_KEY, maps-key]\n---\n", 4, "secrets[1]", `"maps-key": want an environment variable name`},
		{"a secret starting with a digit", "---\nname: a\ntools: [Bash]\nsecrets:\n  - 1KEY\n---\n", 5, "secrets[0]", "want an environment variable name"},
		{"a repeated secret", "---\nname: a\ntools: [Bash]\nsecrets: [A, B, A]\n---\n", 4, "secrets[2]", "A repeats secrets[0]"},
		{"too many secrets", "---\nname: a\ntools: [Bash]\nsecrets: [" + manySecrets(33) + "]\n---\n", 4, "secrets[32]", "more than 32 secrets"},
		{"secrets not a list", "---\nname: a\ntools: [Bash]\nsecrets: KEY\n---\n", 4, "secrets", "want a list, such as [MAPS_API_KEY]"},

		// network, image.
		{"a bad network", "---\nname: a\ntools: [Bash]\nnetwork: intranet\n---\n", 4, "network", `"intranet": want internet or none`},
		{"network by case", "---\nname: a\ntools: [Bash]\nnetwork: None\n---\n", 4, "network", `"None": did you mean none? want internet or none`},
		{"network a boolean", "---\nname: a\ntools: [Bash]\nnetwork: false\n---\n", 4, "network", "want a string, got a boolean"},
		{"a bad image", "---\nname: a\ntools: [Bash]\nimage: ubuntu\n---\n", 4, "image", `"ubuntu": want base or python`},

		// limits.
		{"limits not a mapping", "---\nname: a\ntools: [Bash]\nlimits: 1\n---\n", 4, "limits", "want a mapping, such as {cpu: 1, memory: 1Gi, timeout: 10m}"},
		{"an unknown limit", "---\nname: a\ntools: [Bash]\nlimits:\n  cpu: 1\n  gpu: 1\n---\n", 6, "limits.gpu", "unknown key; want one of cpu, memory, timeout, pids, workspace, run"},
		{"a limit by case", "---\nname: a\ntools: [Bash]\nlimits: {CPU: 1}\n---\n", 4, "limits.CPU", "did you mean cpu?"},
		{"a repeated limit", "---\nname: a\ntools: [Bash]\nlimits:\n  cpu: 1\n  cpu: 2\n---\n", 6, "limits.cpu", "repeated key (first at line 5)"},
		{"cpu a string", "---\nname: a\ntools: [Bash]\nlimits: {cpu: one}\n---\n", 4, "limits.cpu", `want a number of cores, such as 1 or 0.5; got "one"`},
		{"cpu too small", "---\nname: a\ntools: [Bash]\nlimits: {cpu: 0.001}\n---\n", 4, "limits.cpu", "below the minimum of 0.01 cores"},
		{"cpu too large", "---\nname: a\ntools: [Bash]\nlimits: {cpu: 65}\n---\n", 4, "limits.cpu", "above the maximum of 64 cores"},
		{"cpu zero", "---\nname: a\ntools: [Bash]\nlimits: {cpu: 0}\n---\n", 4, "limits.cpu", "must be a positive number"},
		{"cpu infinite", "---\nname: a\ntools: [Bash]\nlimits: {cpu: .inf}\n---\n", 4, "limits.cpu", `want a number of cores, such as 1 or 0.5; got ".inf"`},
		{"cpu NaN", "---\nname: a\ntools: [Bash]\nlimits: {cpu: .nan}\n---\n", 4, "limits.cpu", "want a number of cores"},
		{"memory not a size", "---\nname: a\ntools: [Bash]\nlimits: {memory: lots}\n---\n", 4, "limits.memory", `size "lots": want a number with an optional unit`},
		{"memory too small", "---\nname: a\ntools: [Bash]\nlimits: {memory: 1Mi}\n---\n", 4, "limits.memory", "1Mi: want 16MiB to 256GiB"},
		{"memory too large", "---\nname: a\ntools: [Bash]\nlimits: {memory: 1Ti}\n---\n", 4, "limits.memory", "1Ti: want 16MiB to 256GiB"},
		{"memory a list", "---\nname: a\ntools: [Bash]\nlimits: {memory: [1]}\n---\n", 4, "limits.memory", "want a size"},
		{"workspace too large", "---\nname: a\ntools: [Bash]\nlimits: {workspace: 65Gi}\n---\n", 4, "limits.workspace", "65Gi: want 1MiB to 64GiB"},
		{"timeout not a duration", "---\nname: a\ntools: [Bash]\nlimits: {timeout: soon}\n---\n", 4, "limits.timeout", `"soon": want a duration, such as 30s, 10m or 1h`},
		{"timeout a number", "---\nname: a\ntools: [Bash]\nlimits: {timeout: 10}\n---\n", 4, "limits.timeout", "want a duration, such as 30s, 10m or 1h; got a number"},
		{"timeout too long", "---\nname: a\ntools: [Bash]\nlimits: {timeout: 25h}\n---\n", 4, "limits.timeout", "25h0m0s: want 1s to 24h0m0s"},
		{"timeout too short", "---\nname: a\ntools: [Bash]\nlimits: {timeout: 10ms}\n---\n", 4, "limits.timeout", "10ms: want 1s to 24h0m0s"},
		{"run too long", "---\nname: a\ntools: [Bash]\nlimits:\n  run: 48h\n---\n", 5, "limits.run", "48h0m0s: want 1s to 24h0m0s"},
		{"run negative", "---\nname: a\ntools: [Bash]\nlimits: {run: -1h}\n---\n", 4, "limits.run", "want 1s to 24h0m0s"},
		{"pids a float", "---\nname: a\ntools: [Bash]\nlimits: {pids: 1.5}\n---\n", 4, "limits.pids", "1.5: want a whole number from 16 to 4096"},
		{"pids too many", "---\nname: a\ntools: [Bash]\nlimits: {pids: 5000}\n---\n", 4, "limits.pids", "5000: want a whole number from 16 to 4096"},
		{"pids too few", "---\nname: a\ntools: [Bash]\nlimits: {pids: 1}\n---\n", 4, "limits.pids", "1: want a whole number from 16 to 4096"},
		{"pids a string", "---\nname: a\ntools: [Bash]\nlimits: {pids: many}\n---\n", 4, "limits.pids", `want a whole number; got "many"`},
		{"pids overflow", "---\nname: a\ntools: [Bash]\nlimits: {pids: 99999999999999999999}\n---\n", 4, "limits.pids", "99999999999999999999: want a whole number from 16 to 4096"},

		// gates.
		{"gates not a list", "---\nname: a\ntools: [ApplyChange]\ngates: ApplyChange\n---\n", 4, "gates", "want a list, such as [{tool: ApplyChange}]"},
		{"a gate not a mapping", "---\nname: a\ntools: [ApplyChange]\ngates: [ApplyChange]\n---\n", 4, "gates[0]", "want a mapping, such as {tool: ApplyChange}"},
		{"a gate of another tool", "---\nname: a\ntools: [Write, ApplyChange]\ngates:\n  - tool: ApplyChange\n  - tool: Write\n---\n", 6, "gates[1].tool", `"Write": only ApplyChange may be gated`},
		{"a gate of a tool not granted", "---\nname: a\ntools: [ProposeChange]\ngates:\n  - tool: ApplyChange\n---\n", 5, "gates[0].tool", "ApplyChange is gated but not in tools"},
		{"a repeated gate", "---\nname: a\ntools: [ApplyChange]\ngates: [{tool: ApplyChange}, {tool: ApplyChange}]\n---\n", 4, "gates[1].tool", "gated already by gates[0]"},
		{"a gate with an unknown key", "---\nname: a\ntools: [ApplyChange]\ngates:\n  - tool: ApplyChange\n    until: tomorrow\n---\n", 6, "gates[0].until", "unknown key; want one of tool"},
		{"a gate without its tool", "---\nname: a\ntools: [ApplyChange]\ngates: [{}]\n---\n", 4, "gates[0].tool", "required: the gated tool"},
		{"a gate's tool not a string", "---\nname: a\ntools: [ApplyChange]\ngates: [{tool: [ApplyChange]}]\n---\n", 4, "gates[0].tool", "want a string, got a list"},

		// Size.
		{"too large", "---\nname: a\ntools: [Read]\n---\n" + strings.Repeat("x", MaxBytes), 0, "", "an agent file is at most 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("a", []byte(tc.file))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %+v, %v; want an *Error", f, err)
			}
			if e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("Parse = line %d field %q message %q; want line %d field %q message with %q", e.Line, e.Field, e.Message, tc.line, tc.field, tc.msg)
			}
		})
	}
}

func manySecrets(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = "K" + strings.Repeat("X", i)
	}
	return strings.Join(s, ", ")
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Line: 4, Field: "model", Message: "unknown key"}, `line 4: field "model": unknown key`},
		{Error{Line: 1, Message: "no front matter"}, "line 1: no front matter"},
		{Error{Field: "tools", Message: "x"}, `field "tools": x`},
		{Error{Message: "x"}, "x"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte("---\nname: a\ntools: [Read]\n---\n"))
	f.Add([]byte("---\nname: a\ntools: [Read]\nlimits: {cpu: 1e300, pids: 0x10}\ngates: [{tool: ApplyChange}]\n---\n"))
	f.Add([]byte("---\nname: &x a\ntools: *x\n---\n"))
	f.Add([]byte("---\n? [a]\n: b\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("a", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v (%T), not an *Error", err, err)
			}
			if e.Line < 0 {
				t.Fatalf("Parse: line %d", e.Line)
			}
			return
		}
		if file.Name != "a" || len(file.Tools) == 0 || file.Network == "" || file.Image == "" {
			t.Fatalf("Parse = %+v: accepted an incomplete file", file)
		}
	})
}
