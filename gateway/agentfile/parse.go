package agentfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/size"
)

// Images are the step images a run may ask for (a run's steps, an agent
// file's image): the one list of them.
var Images = []string{"base", "python"}

// Networks are the values of an agent file's network.
var Networks = []string{"internet", "none"}

// MinRun is the shortest run lifetime (limits.run) a file may give.
const MinRun = time.Second

// MaxSecrets bounds an agent file's secrets.
const MaxSecrets = 32

// MaxSecretName bounds the length of a secret's name.
const MaxSecretName = 64

// ValidSecretName reports whether s can name a secret (in an agent file
// and in PUT /v1/secrets/{name}): an environment variable name of
// upper-case letters, digits and '_', not starting with a digit, at most
// MaxSecretName bytes.
func ValidSecretName(s string) bool { return len(s) <= MaxSecretName && secretRE.MatchString(s) }

var (
	secretRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
	// yamlLineRE finds the line in a YAML error ("yaml: line 3: ...").
	yamlLineRE = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)
)

// keys are the front matter's keys, in the order the docs list them;
// limitKeys those of limits, gateKeys those of a gate.
var (
	keys      = []string{"name", "description", "tools", "secrets", "network", "image", "limits", "gates"}
	limitKeys = []string{"cpu", "memory", "timeout", "pids", "workspace", "run"}
	gateKeys  = []string{"tool"}
)

// shape is the front matter an agent file starts with, for the error of
// one that has none.
const shape = "an agent file starts with its front matter between two lines \"---\", then its instructions:\n" +
	"---\nname: NAME\ndescription: what the agent does\ntools: [Read, Glob, Grep]\n---\nInstructions for the agent, in Markdown."

// Parse reads the agent file of agent name (its front matter's name must
// be name). Every error is an *Error, with the line of the whole file
// and the field it is about.
func Parse(name string, data []byte) (*File, error) {
	if len(data) > MaxBytes {
		return nil, &Error{Message: fmt.Sprintf("%d bytes: an agent file is at most %d bytes", len(data), MaxBytes)}
	}
	front, body, err := split(data)
	if err != nil {
		return nil, err
	}
	root, err := decode(front)
	if err != nil {
		return nil, err
	}
	p := parser{f: &File{Body: body, Network: "internet", Image: "base", Secrets: []string{}, Gates: []string{}, Limits: defaultLimits()}}
	if err := p.file(root); err != nil {
		return nil, err
	}
	if err := p.check(name); err != nil {
		return nil, err
	}
	return p.f, nil
}

// frontLine is the file's line of the front matter's first line: YAML's
// line 1.
const frontLine = 2

// split cuts data into the front matter (the lines between a first line
// "---" and the next line "---") and the body after it.
func split(data []byte) (front []byte, body string, err error) {
	first, rest, _ := bytes.Cut(data, []byte("\n"))
	if !isFence(first) {
		return nil, "", &Error{Line: 1, Message: "no front matter: " + shape}
	}
	line := 1
	for off := 0; off < len(rest); {
		end := bytes.IndexByte(rest[off:], '\n')
		next := len(rest)
		if end >= 0 {
			next = off + end + 1
		}
		line++
		l := rest[off:next]
		if isFence(bytes.TrimSuffix(l, []byte("\n"))) {
			return rest[:off], string(rest[next:]), nil
		}
		off = next
	}
	return nil, "", &Error{Line: line, Message: "the front matter opened at line 1 is not closed by a line \"---\": " + shape}
}

// isFence reports whether line is "---" (trailing blanks and a CR
// allowed).
func isFence(line []byte) bool {
	return string(bytes.TrimRight(line, " \t\r")) == "---"
}

// decode reads the front matter into its root mapping.
func decode(front []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(front))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Line: 1, Message: "the front matter is empty: " + shape}
		}
		return nil, yamlError(err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(err)
		}
		return nil, &Error{Line: more.Line + frontLine - 1, Message: "the front matter holds more than one YAML document"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{Line: 1, Message: "the front matter is empty: " + shape}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Line: root.Line + frontLine - 1, Message: "the front matter is not a mapping of keys (name: ..., tools: ...): " + shape}
	}
	return root, nil
}

// yamlError is a YAML syntax error with the line of the whole file.
func yamlError(err error) *Error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		if parserProblems[m[2]] {
			n++
		}
		return &Error{Line: n + frontLine - 1, Message: "not valid YAML: " + m[2]}
	}
	return &Error{Line: 1, Message: "the front matter is not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// parserProblems are the problems yaml.v3's parser (not its scanner)
// reports: their line is counted from 0 (the line where the open
// collection started), the scanner's from 1.
var parserProblems = map[string]bool{
	"did not find expected ',' or ']'":    true,
	"did not find expected ',' or '}'":    true,
	"did not find expected '-' indicator": true,
	"did not find expected key":           true,
	"did not find expected node content":  true,
	"found undefined tag handle":          true,
}

// parser fills f from the front matter's nodes.
type parser struct {
	f *File
	// seen are the keys given, with their lines.
	seen map[string]*yaml.Node
}

// errAt is an *Error at node n's line.
func errAt(n *yaml.Node, field, format string, args ...any) *Error {
	return &Error{Line: n.Line + frontLine - 1, Field: field, Message: fmt.Sprintf(format, args...)}
}

// pairs walks mapping n (field names it for errors) and calls fn for each
// key and value; it refuses keys not in allowed, repeated keys, and keys
// that are not plain strings.
func pairs(n *yaml.Node, field string, allowed []string, fn func(key string, v *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" || k.Anchor != "" {
			return errAt(k, field, "a key must be a plain word, one of %s", strings.Join(allowed, ", "))
		}
		name := join(field, k.Value)
		if !slices.Contains(allowed, k.Value) {
			msg := fmt.Sprintf("unknown key; want one of %s", strings.Join(allowed, ", "))
			if s := suggest(k.Value, allowed); s != "" {
				msg = fmt.Sprintf("unknown key; did you mean %s? want one of %s", s, strings.Join(allowed, ", "))
			}
			return errAt(k, name, "%s", msg)
		}
		if line, dup := seen[k.Value]; dup {
			return errAt(k, name, "repeated key (first at line %d)", line)
		}
		seen[k.Value] = k.Line + frontLine - 1
		if err := plain(v, name); err != nil {
			return err
		}
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

// plain refuses anchors, aliases and merge keys: a front matter is a few
// plain keys.
func plain(n *yaml.Node, field string) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return errAt(n, field, "anchors and aliases (&, *) are not allowed in an agent file")
	}
	return nil
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// suggest is the one of valid that s matches ignoring case, or "".
func suggest(s string, valid []string) string {
	for _, v := range valid {
		if strings.EqualFold(s, v) {
			return v
		}
	}
	return ""
}

// file reads the root mapping.
func (p *parser) file(root *yaml.Node) error {
	p.seen = map[string]*yaml.Node{}
	return pairs(root, "", keys, func(key string, v *yaml.Node) error {
		p.seen[key] = v
		var err error
		switch key {
		case "name":
			p.f.Name, err = str(v, key)
		case "description":
			p.f.Description, err = str(v, key)
		case "tools":
			p.f.Tools, err = p.tools(v)
		case "secrets":
			p.f.Secrets, err = secrets(v)
		case "network":
			p.f.Network, err = oneOf(v, key, Networks)
		case "image":
			p.f.Image, err = oneOf(v, key, Images)
		case "limits":
			p.f.Limits, err = limits(v)
		case "gates":
			p.f.Gates, err = gates(v)
		}
		return err
	})
}

// check applies the rules across keys: the name, at least one tool,
// gates only of granted tools.
func (p *parser) check(name string) error {
	n, ok := p.seen["name"]
	switch {
	case !ok:
		return &Error{Line: 1, Field: "name", Message: fmt.Sprintf("required: the agent's name (name: %s)", name)}
	case cluster.ValidateAgentName(p.f.Name) != nil:
		return errAt(n, "name", "%v", cluster.ValidateAgentName(p.f.Name))
	case p.f.Name != name:
		return errAt(n, "name", "%q: the file %s must be named %s", p.f.Name, Path(name), name)
	}
	if _, ok := p.seen["tools"]; !ok {
		return &Error{Line: 1, Field: "tools", Message: "required: at least one tool of " + strings.Join(api.Tools, ", ")}
	}
	if g, ok := p.seen["gates"]; ok {
		for i, tool := range p.f.Gates {
			if !p.f.Has(tool) {
				return errAt(g.Content[i], fmt.Sprintf("gates[%d].tool", i), "%s is gated but not in tools: add it to tools or remove the gate", tool)
			}
		}
	}
	return nil
}

// str reads a string scalar.
func str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", errAt(n, field, "want a string, got %s (quote it if it is one)", kindOf(n))
	}
	return n.Value, nil
}

// kindOf names what node n is, for errors.
func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!str":
			return fmt.Sprintf("%q", n.Value)
		}
		return fmt.Sprintf("a value tagged %s", n.ShortTag())
	}
	return "an alias"
}

// list reads a sequence of strings; each item is checked by item.
func list(n *yaml.Node, field, example string, item func(i int, s string, n *yaml.Node) error) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, errAt(n, field, "want a list, such as %s; got %s", example, kindOf(n))
	}
	out := make([]string, 0, len(n.Content))
	for i, it := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := plain(it, f); err != nil {
			return nil, err
		}
		s, err := str(it, f)
		if err != nil {
			return nil, err
		}
		if j := slices.Index(out, s); j >= 0 {
			return nil, errAt(it, f, "%s repeats %s[%d]", s, field, j)
		}
		if err := item(i, s, it); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (p *parser) tools(n *yaml.Node) ([]string, error) {
	tools, err := list(n, "tools", "[Read, Grep]", func(i int, s string, it *yaml.Node) error {
		if slices.Contains(api.Tools, s) {
			return nil
		}
		f := fmt.Sprintf("tools[%d]", i)
		if m := suggest(s, api.Tools); m != "" {
			return errAt(it, f, "unknown tool %q: did you mean %s? want one of %s", s, m, strings.Join(api.Tools, ", "))
		}
		return errAt(it, f, "unknown tool %q: want one of %s", s, strings.Join(api.Tools, ", "))
	})
	if err == nil && len(tools) == 0 {
		return nil, errAt(n, "tools", "want at least one tool of %s", strings.Join(api.Tools, ", "))
	}
	return tools, err
}

func secrets(n *yaml.Node) ([]string, error) {
	out, err := list(n, "secrets", "[MAPS_API_KEY]", func(i int, s string, it *yaml.Node) error {
		f := fmt.Sprintf("secrets[%d]", i)
		if i >= MaxSecrets {
			return errAt(it, f, "more than %d secrets", MaxSecrets)
		}
		if !ValidSecretName(s) {
			return errAt(it, f, "%q: want an environment variable name: upper-case letters, digits and '_', not starting with a digit, at most %d", s, MaxSecretName)
		}
		return nil
	})
	return out, err
}

// oneOf reads a string that must be one of valid.
func oneOf(n *yaml.Node, field string, valid []string) (string, error) {
	s, err := str(n, field)
	if err != nil {
		return "", err
	}
	if !slices.Contains(valid, s) {
		if m := suggest(s, valid); m != "" {
			return "", errAt(n, field, "%q: did you mean %s? want %s", s, m, strings.Join(valid, " or "))
		}
		return "", errAt(n, field, "%q: want %s", s, strings.Join(valid, " or "))
	}
	return s, nil
}

func gates(n *yaml.Node) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, errAt(n, "gates", "want a list, such as [{tool: ApplyChange}]; got %s", kindOf(n))
	}
	out := make([]string, 0, len(n.Content))
	for i, it := range n.Content {
		f := fmt.Sprintf("gates[%d]", i)
		if err := plain(it, f); err != nil {
			return nil, err
		}
		if it.Kind != yaml.MappingNode {
			return nil, errAt(it, f, "want a mapping, such as {tool: ApplyChange}; got %s", kindOf(it))
		}
		tool := ""
		err := pairs(it, f, gateKeys, func(_ string, v *yaml.Node) error {
			s, err := str(v, f+".tool")
			if err != nil {
				return err
			}
			if s != api.ToolApplyChange {
				return errAt(v, f+".tool", "%q: only %s may be gated", s, api.ToolApplyChange)
			}
			if j := slices.Index(out, s); j >= 0 {
				return errAt(v, f+".tool", "%s is gated already by gates[%d]", s, j)
			}
			tool = s
			return nil
		})
		if err != nil {
			return nil, err
		}
		if tool == "" {
			return nil, errAt(it, f+".tool", "required: the gated tool, such as {tool: ApplyChange}")
		}
		out = append(out, tool)
	}
	return out, nil
}

// defaultLimits are the limits of a file that names none: the cluster's
// defaults of a step, and DefaultRun.
func defaultLimits() api.AgentLimits {
	return api.AgentLimits{
		CPU:       cluster.DefaultRequest.CPU,
		Memory:    size.Format(cluster.DefaultRequest.MemoryBytes),
		Timeout:   api.Duration(cluster.DefaultLimits.Timeout),
		Pids:      cluster.DefaultLimits.Pids,
		Workspace: size.Format(cluster.DefaultLimits.WorkspaceBytes),
		Run:       api.Duration(DefaultRun),
	}
}

func limits(n *yaml.Node) (api.AgentLimits, error) {
	l := defaultLimits()
	if n.Kind != yaml.MappingNode {
		return l, errAt(n, "limits", "want a mapping, such as {cpu: 1, memory: 1Gi, timeout: 10m}; got %s", kindOf(n))
	}
	err := pairs(n, "limits", limitKeys, func(key string, v *yaml.Node) error {
		f := "limits." + key
		var err error
		switch key {
		case "cpu":
			l.CPU, err = cpu(v, f)
		case "memory":
			_, err = sizeOf(v, f, cluster.MinRequest.MemoryBytes, cluster.MaxRequest.MemoryBytes)
			l.Memory = strings.TrimSpace(v.Value)
		case "workspace":
			_, err = sizeOf(v, f, cluster.MinLimits.WorkspaceBytes, cluster.MaxLimits.WorkspaceBytes)
			l.Workspace = strings.TrimSpace(v.Value)
		case "timeout":
			var d time.Duration
			d, err = duration(v, f, cluster.MinLimits.Timeout, cluster.MaxLimits.Timeout)
			l.Timeout = api.Duration(d)
		case "run":
			var d time.Duration
			d, err = duration(v, f, MinRun, MaxRun)
			l.Run = api.Duration(d)
		case "pids":
			l.Pids, err = integer(v, f, cluster.MinLimits.Pids, cluster.MaxLimits.Pids)
		}
		return err
	})
	return l, err
}

func cpu(n *yaml.Node, field string) (float64, error) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return 0, errAt(n, field, "want a number of cores, such as 1 or 0.5; got %s", kindOf(n))
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || math.IsNaN(v) {
		return 0, errAt(n, field, "want a number of cores, such as 1 or 0.5; got %q", n.Value)
	}
	if err := cluster.CheckCPU(v, cluster.MaxRequest.CPU); err != nil {
		return 0, errAt(n, field, "%v", err)
	}
	return v, nil
}

// sizeOf reads a size (internal/size) in [lo, hi].
func sizeOf(n *yaml.Node, field string, lo, hi int64) (int64, error) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		return 0, errAt(n, field, "want a size, %s; got %s", size.Forms, kindOf(n))
	}
	b, err := size.Parse(n.Value)
	if err != nil {
		return 0, errAt(n, field, "%v", err)
	}
	if b < lo || b > hi {
		return 0, errAt(n, field, "%s: want %s to %s", strings.TrimSpace(n.Value), size.Format(lo), size.Format(hi))
	}
	return b, nil
}

// duration reads a duration (time.ParseDuration) in [lo, hi].
func duration(n *yaml.Node, field string, lo, hi time.Duration) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return 0, errAt(n, field, "want a duration, such as 30s, 10m or 1h; got %s", kindOf(n))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, errAt(n, field, "%q: want a duration, such as 30s, 10m or 1h", n.Value)
	}
	if d < lo || d > hi {
		return 0, errAt(n, field, "%v: want %v to %v", d, lo, hi)
	}
	return d, nil
}

// integer reads an integer in [lo, hi].
func integer(n *yaml.Node, field string, lo, hi int64) (int64, error) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return 0, errAt(n, field, "want a whole number; got %s", kindOf(n))
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < lo || v > hi {
		return 0, errAt(n, field, "%s: want a whole number from %d to %d", n.Value, lo, hi)
	}
	return v, nil
}
