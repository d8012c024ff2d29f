package web

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/rodon-compute/rodon/api"
)

// The page's TypeScript view of the gateway's JSON (src/api.ts and the
// frame types of src/stream.ts) is checked against the Go types of package
// api, the contract: every field the page declares must be a JSON field of
// the Go type, of a compatible type, and optional where Go may leave it
// out; the constants the page declares must equal Go's. The TypeScript is
// read by a small, strict reader of the subset these files use: a line it
// cannot read fails the test rather than being skipped.

// tsContract maps each exported interface and type alias of a checked
// file to the Go type it declares, or to nil for the page's own types
// (not JSON of the gateway), which are not read.
var tsContract = map[string]map[string]reflect.Type{
	"src/api.ts": {
		"Account":              reflect.TypeFor[api.Account](),
		"Me":                   reflect.TypeFor[api.Me](),
		"SignInAnswer":         reflect.TypeFor[api.SignInAnswer](),
		"Workspace":            reflect.TypeFor[api.Workspace](),
		"Tenant":               reflect.TypeFor[api.Tenant](),
		"SwitchAccountRequest": reflect.TypeFor[api.SwitchAccountRequest](),
		"CreateMemberRequest":  reflect.TypeFor[api.CreateMemberRequest](),
		"UpdateMemberRequest":  reflect.TypeFor[api.UpdateMemberRequest](),
		"Key":                  reflect.TypeFor[api.Key](),
		"CreateKeyRequest":     reflect.TypeFor[api.CreateKeyRequest](),
		"CreateKeyAnswer":      reflect.TypeFor[api.CreateKeyAnswer](),
		"Secret":               reflect.TypeFor[api.Secret](),
		"PutSecretRequest":     reflect.TypeFor[api.PutSecretRequest](),
		"AuditEntry":           reflect.TypeFor[api.AuditEntry](),
		"AuditDocument":        reflect.TypeFor[api.AuditDocument](),
		"PhaseName":            reflect.TypeFor[string](),
		"Phases":               reflect.TypeFor[api.Phases](),
		"Cancel":               reflect.TypeFor[api.Cancel](),
		"StepEvent":            reflect.TypeFor[api.Event](),
		"FilesChanged":         reflect.TypeFor[api.FilesChanged](),
		"RunStep":              reflect.TypeFor[api.RunStep](),
		"Operation":            reflect.TypeFor[api.Operation](),
		"StepSpec":             reflect.TypeFor[api.StepSpec](),
		"EgressPayload":        reflect.TypeFor[api.Egress](),
		"ExitPayload":          reflect.TypeFor[api.ExitEvent](),
		"OutputPayload":        reflect.TypeFor[api.Output](),
		"Author":               reflect.TypeFor[api.Author](),
		"Revision":             reflect.TypeFor[api.Revision](),
		"TreeEntry":            reflect.TypeFor[api.TreeEntry](),
		"WorkspaceDiff":        reflect.TypeFor[api.WorkspaceDiff](),
		"FileDiff":             reflect.TypeFor[api.FileDiff](),
		"RestoreRequest":       reflect.TypeFor[api.RestoreRequest](),
		"UploadRequest":        reflect.TypeFor[api.UploadRequest](),
		"UploadFile":           reflect.TypeFor[api.UploadFile](),
		"UploadResponse":       reflect.TypeFor[api.UploadResponse](),
		"RunAgent":             reflect.TypeFor[api.RunAgent](),
		"AgentLimits":          reflect.TypeFor[api.AgentLimits](),
		"Refusal":              reflect.TypeFor[api.Refusal](),
		"ToolStep":             reflect.TypeFor[api.ToolStep](),
		"ProposedFile":         reflect.TypeFor[api.ProposedFile](),
		"Proposal":             reflect.TypeFor[api.Proposal](),
		"ApproveRequest":       reflect.TypeFor[api.ApproveRequest](),
		"RunEvent":             reflect.TypeFor[api.RunEvent](),
		"EventChange":          reflect.TypeFor[api.EventChange](),
	},
	"src/stream.ts": {
		"FrameKind":      reflect.TypeFor[api.FrameKind](),
		"Frame":          reflect.TypeFor[api.Frame](),
		"ExitData":       reflect.TypeFor[api.Exit](),
		"StreamState":    nil,
		"StreamHandlers": nil,
		"StreamOptions":  nil,
	},
}

// tsConstants are the values the page's exported constants must have.
var tsConstants = map[string]map[string]any{
	"src/api.ts": {
		"PHASES":                 jsonNames(reflect.TypeFor[api.Phases]()),
		"ROLES":                  roleNames(),
		"STEP_ENDED":             terminalStates(),
		"RUN_RUNNING":            api.RunRunning,
		"CLOSE_UNAUTHORIZED":     api.CloseUnauthorized,
		"CLOSE_FORBIDDEN":        api.CloseForbidden,
		"AUTHOR_ACCOUNT":         api.AuthorAccount,
		"AUTHOR_KEY":             api.AuthorKey,
		"AUTHOR_STEP":            api.AuthorStep,
		"TOOLS":                  api.Tools,
		"TOOL_BASH":              api.ToolBash,
		"RUN_AWAITING_APPROVAL":  api.RunAwaitingApproval,
		"STEP_DONE":              api.StepDone,
		"STEP_REFUSED":           api.StepRefused,
		"STEP_AWAITING_APPROVAL": api.StepAwaitingApproval,
		"PROPOSAL_PROPOSED":      api.ProposalProposed,
		"PROPOSAL_APPROVED":      api.ProposalApproved,
		"PROPOSAL_APPLIED":       api.ProposalApplied,
		"PROPOSAL_REJECTED":      api.ProposalRejected,
	},
}

// tsLiterals are the values of the Go string types a TypeScript union of
// literals stands for (FrameKind = "stdout" | ...).
var tsLiterals = map[reflect.Type][]string{
	reflect.TypeFor[api.FrameKind](): {string(api.KindStdout), string(api.KindStderr), string(api.KindEvent), string(api.KindExit)},
}

// roleNames are the names of the roles a member or key may have, least first.
func roleNames() []string {
	var out []string
	for _, r := range []api.Role{api.RoleViewer, api.RoleEditor, api.RoleAdmin, api.RoleOwner} {
		out = append(out, r.String())
	}
	return out
}

func terminalStates() []string {
	var out []string
	for _, s := range []string{api.StepQueued, api.StepPlaced, api.StepStarting, api.StepRunning,
		api.StepExited, api.StepFailed, api.StepCancelled, api.StepLost, api.StepExpired} {
		if api.TerminalState(s) {
			out = append(out, s)
		}
	}
	return out
}

func TestAPITypes(t *testing.T) {
	for file, types := range tsContract {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range checkTS(file, string(src), types, tsConstants[file]) {
			t.Error(e)
		}
	}
}

// TestAPITypesCatch shows the check failing on each kind of drift, and
// the reader refusing what it does not know.
func TestAPITypesCatch(t *testing.T) {
	types := map[string]reflect.Type{"Workspace": reflect.TypeFor[api.Workspace](), "Operation": reflect.TypeFor[api.Operation](),
		"UpdateMemberRequest": reflect.TypeFor[api.UpdateMemberRequest]()}
	consts := map[string]any{"RUN_RUNNING": api.RunRunning, "CLOSE_FORBIDDEN": api.CloseForbidden}
	ok := `
export interface Workspace {
  id: string;
  name: string;
  /** when it was made */
  created_at?: string;
}
export interface Operation {
  id: string;
  steps: { id: string; state: "queued" | "running" | string; exit_code?: number | null }[];
  cancel?: { requested_at: string } | null;
  created_by?: { kind: string; id: string };
}
export interface UpdateMemberRequest {
  role?: string | null;
}
export const RUN_RUNNING = "running";
export const CLOSE_FORBIDDEN = 4403;
`
	if errs := checkTS("ok.ts", ok, types, consts); len(errs) != 0 {
		t.Fatalf("the correct file: %q", errs)
	}
	for _, tt := range []struct {
		name, from, to, want string
	}{
		{"a field Go does not have", "  name: string;\n", "  title: string;\n", `Workspace.title: api.Workspace has no JSON field "title"`},
		{"a misspelt nested field", "exit_code?: number", "exitcode?: number", `no JSON field "exitcode"`},
		{"a wrong type", "  name: string;\n", "  name: number;\n", "Workspace.name: number, but Go's string is a JSON string"},
		{"an array for an object", "cancel?: { requested_at: string } | null", "cancel?: string[]", "an array, but Go's api.Cancel is a JSON object"},
		{"required where Go may omit", "exit_code?: number | null", "exit_code: number | null", "exit_code: Go may leave it out (omitempty): declare it optional"},
		{"an omitted pointer needs no null", "cancel?: { requested_at: string } | null", "cancel?: { requested_at: string }", ""},
		{"a null pointer not declared", "role?: string | null;", "role?: string;", "UpdateMemberRequest.role: Go's *api.Role may be null: add | null"},
		{"an interface not in the contract", "export interface Operation {", "export interface Run {", `interface Run: not in the contract`},
		{"a constant changed", `RUN_RUNNING = "running"`, `RUN_RUNNING = "live"`, `RUN_RUNNING = "live", want "running"`},
		{"a constant gone", "export const CLOSE_FORBIDDEN = 4403;\n", "", "CLOSE_FORBIDDEN: not declared"},
		{"syntax the reader does not know", "  name: string;\n", "  name: Array<string>;\n", "cannot read"},
		{"two fields on a line", "  name: string;\n", "  name: string; id: string;\n", "cannot read"},
		{"a method in a contract interface", "  name: string;\n", "  name(): string;\n", "cannot read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(ok, tt.from) {
				t.Fatalf("the correct file holds no %q", tt.from)
			}
			errs := checkTS("bad.ts", strings.Replace(ok, tt.from, tt.to, 1), types, consts)
			got := strings.Join(errs, "\n")
			if tt.want == "" {
				// A pointer field that is optional: Go omits it when
				// nil, so no null is needed.
				if len(errs) != 0 {
					t.Errorf("errors %q, want none", errs)
				}
				return
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("errors %q, want one saying %q", errs, tt.want)
			}
		})
	}
}

// checkTS checks the exported interfaces, type aliases and constants of
// one TypeScript file against the Go types and values.
func checkTS(file, src string, types map[string]reflect.Type, consts map[string]any) []string {
	var errs []string
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", file, line, fmt.Sprintf(format, args...)))
	}
	lines := strings.Split(src, "\n")
	seen := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case strings.HasPrefix(line, "export interface "):
			name, ok := strings.CutSuffix(strings.TrimPrefix(line, "export interface "), " {")
			if !ok || !isIdent(name) {
				fail(i+1, "cannot read %q: want \"export interface Name {\"", line)
				continue
			}
			start := i
			for i++; i < len(lines) && lines[i] != "}"; i++ {
			}
			seen[name] = true
			goType, known := types[name]
			switch {
			case !known:
				fail(start+1, "interface %s: not in the contract (map it to its Go type in tsContract, or to nil if it is the page's own)", name)
				continue
			case goType == nil:
				continue
			}
			body, err := readBody(lines[start+1 : i])
			if err != nil {
				fail(start+1, "interface %s: %v", name, err)
				continue
			}
			for _, f := range body {
				for _, e := range checkField(name, f, goType, types) {
					fail(start+1+f.line, "%s", e)
				}
			}
		case strings.HasPrefix(line, "export type "):
			name, rhs, ok := strings.Cut(strings.TrimPrefix(line, "export type "), " = ")
			rhs, semi := strings.CutSuffix(rhs, ";")
			if !ok || !semi || !isIdent(name) {
				fail(i+1, "cannot read %q: want \"export type Name = ...;\"", line)
				continue
			}
			seen[name] = true
			goType, known := types[name]
			switch {
			case !known:
				fail(i+1, "type %s: not in the contract (map it to its Go type in tsContract, or to nil if it is the page's own)", name)
				continue
			case goType == nil:
				continue
			}
			checkAlias(name, rhs, goType, types, func(format string, args ...any) { fail(i+1, format, args...) })
		case strings.HasPrefix(line, "export const "):
			name, rhs, ok := strings.Cut(strings.TrimPrefix(line, "export const "), " = ")
			want, checked := consts[name]
			if !ok || !checked {
				continue
			}
			seen["const "+name] = true
			got, err := readConst(rhs)
			if err != nil {
				fail(i+1, "%s: cannot read %q: %v", name, rhs, err)
				continue
			}
			if !reflect.DeepEqual(got, normalize(want)) {
				fail(i+1, "%s = %s, want %s", name, show(got), show(normalize(want)))
			}
		}
	}
	for name := range types {
		if !seen[name] {
			errs = append(errs, fmt.Sprintf("%s: %s: not declared", file, name))
		}
	}
	for name := range consts {
		if !seen["const "+name] {
			errs = append(errs, fmt.Sprintf("%s: %s: not declared", file, name))
		}
	}
	slices.Sort(errs)
	return errs
}

// checkAlias checks "export type Name = ...": a union of string literals
// standing for a Go string type's values, or the two forms of Phases.
func checkAlias(name, rhs string, goType reflect.Type, types map[string]reflect.Type, fail func(string, ...any)) {
	switch rhs {
	case "(typeof PHASES)[number]":
		if goType.Kind() != reflect.String {
			fail("type %s: the phase names are strings, not %s", name, goType)
		}
		return
	case "Partial<Record<PhaseName, string>>":
		// PHASES holds the field names (tsConstants); every field of the
		// Go type must be an optional time.
		for _, f := range jsonFields(goType) {
			if jsonKind(f.typ) != "string" || !f.omit {
				fail("type %s: Go's field %q is not an optional time", name, f.name)
			}
		}
		return
	}
	values, ok := tsLiterals[goType]
	if !ok {
		fail("type %s: cannot read %q: the reader knows unions of string literals for %v only", name, rhs, slices.Collect(maps.Keys(tsLiterals)))
		return
	}
	var got []string
	for _, part := range strings.Split(rhs, " | ") {
		s, err := strconv.Unquote(part)
		if err != nil {
			fail("type %s: cannot read %q: want string literals joined by \" | \"", name, rhs)
			return
		}
		got = append(got, s)
	}
	if !slices.Equal(got, values) {
		fail("type %s = %q, want Go's values %q", name, got, values)
	}
}

// tsField is one member of an interface or object type.
type tsField struct {
	line     int // within the body, from 1
	name     string
	optional bool
	typ      tsType
}

// tsType is a TypeScript type of the subset: a union of alternatives.
type tsType []tsAlt

// tsAlt is one alternative of a union: a primitive ("string", "number",
// "boolean", "unknown", "null"), a string literal, a named type, an object
// or an array of an element type, or a Record<string, T>.
type tsAlt struct {
	kind   string // "prim", "lit", "name", "object", "array", "record"
	name   string // prim or type name, or the literal's value
	fields []tsField
	elem   tsType
}

// readBody reads the members of an interface, one a line; comments (// and
// /** ... */ on lines of their own) and blank lines are skipped.
func readBody(lines []string) ([]tsField, error) {
	var out []tsField
	inDoc := false
	for i, raw := range lines {
		line := strings.TrimSpace(raw)
		switch {
		case inDoc:
			inDoc = !strings.HasSuffix(line, "*/")
			continue
		case line == "" || strings.HasPrefix(line, "//"):
			continue
		case strings.HasPrefix(line, "/*"):
			inDoc = !strings.HasSuffix(line, "*/")
			continue
		}
		p := &tsParser{s: line}
		f, err := p.field(false)
		if err == nil {
			p.space()
			if p.i != len(p.s) {
				err = fmt.Errorf("more after the field's \";\" at %q", p.s[p.i:])
			}
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read %q: %v", line, err)
		}
		f.line = i + 1
		out = append(out, f)
	}
	return out, nil
}

// tsParser reads a type expression of the subset from s.
type tsParser struct {
	s string
	i int
}

func (p *tsParser) space() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *tsParser) eat(tok string) bool {
	p.space()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *tsParser) ident() string {
	p.space()
	j := p.i
	for j < len(p.s) && (p.s[j] == '_' || unicode.IsLetter(rune(p.s[j])) || j > p.i && unicode.IsDigit(rune(p.s[j]))) {
		j++
	}
	id := p.s[p.i:j]
	p.i = j
	return id
}

// field reads "name?: type;"; in an inline object the last member's ";"
// may be left out before the "}".
func (p *tsParser) field(inline bool) (tsField, error) {
	f := tsField{name: p.ident()}
	if f.name == "" {
		return f, fmt.Errorf("want a field name at %q", p.s[p.i:])
	}
	f.optional = p.eat("?")
	if !p.eat(":") {
		return f, fmt.Errorf("want \":\" after %s", f.name)
	}
	t, err := p.union()
	if err != nil {
		return f, err
	}
	f.typ = t
	if !p.eat(";") {
		if p.space(); !inline || !strings.HasPrefix(p.s[p.i:], "}") {
			return f, fmt.Errorf("want \";\" at %q", p.s[p.i:])
		}
	}
	return f, nil
}

func (p *tsParser) union() (tsType, error) {
	var t tsType
	for {
		a, err := p.alt()
		if err != nil {
			return nil, err
		}
		t = append(t, a)
		if !p.eat("|") {
			return t, nil
		}
	}
}

func (p *tsParser) alt() (tsAlt, error) {
	var a tsAlt
	p.space()
	switch {
	case p.eat("{"):
		a.kind = "object"
		for !p.eat("}") {
			f, err := p.field(true)
			if err != nil {
				return a, err
			}
			a.fields = append(a.fields, f)
		}
	case p.i < len(p.s) && p.s[p.i] == '"':
		j := strings.IndexByte(p.s[p.i+1:], '"')
		if j < 0 {
			return a, fmt.Errorf("unterminated string at %q", p.s[p.i:])
		}
		a.kind, a.name = "lit", p.s[p.i+1:p.i+1+j]
		p.i += j + 2
	default:
		id := p.ident()
		switch id {
		case "":
			return a, fmt.Errorf("want a type at %q", p.s[p.i:])
		case "string", "number", "boolean", "unknown", "null":
			a.kind, a.name = "prim", id
		case "Record":
			if !p.eat("<") || p.ident() != "string" || !p.eat(",") {
				return a, fmt.Errorf("want Record<string, T>")
			}
			elem, err := p.union()
			if err != nil {
				return a, err
			}
			if !p.eat(">") {
				return a, fmt.Errorf("want \">\" closing Record<string, T>")
			}
			a.kind, a.elem = "record", elem
		default:
			if p.eat("<") {
				return a, fmt.Errorf("generic type %s<...>: the reader knows Record<string, T> only", id)
			}
			a.kind, a.name = "name", id
		}
	}
	for p.eat("[]") {
		a = tsAlt{kind: "array", elem: tsType{a}}
	}
	return a, nil
}

// A goField is one JSON field of a Go struct.
type goField struct {
	name string
	typ  reflect.Type
	omit bool // omitempty or omitzero: Go may leave it out
}

func jsonFields(t reflect.Type) []goField {
	var out []goField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, goField{name: name, typ: f.Type, omit: strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")})
	}
	return out
}

func jsonNames(t reflect.Type) []string {
	var out []string
	for _, f := range jsonFields(t) {
		out = append(out, f.name)
	}
	return out
}

// jsonKind is what JSON a Go type is written as: string, number, boolean,
// array, map, object or any (json.RawMessage, interfaces).
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.RawMessage]() || t.Kind() == reflect.Interface {
		return "any"
	}
	if t.Implements(reflect.TypeFor[json.Marshaler]()) {
		// Time, Duration, Role: what their zero value is written as.
		b, err := json.Marshal(reflect.Zero(t).Interface())
		if err != nil || len(b) == 0 {
			return "any"
		}
		switch c := b[0]; {
		case c == '"':
			return "string"
		case c == '-' || c >= '0' && c <= '9':
			return "number"
		case c == 't' || c == 'f':
			return "boolean"
		case c == '[':
			return "array"
		case c == '{':
			return "object"
		}
		return "any"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string" // base64
		}
		return "array"
	case reflect.Array:
		return "array"
	case reflect.Map:
		return "map"
	case reflect.Struct:
		return "object"
	}
	return "any"
}

var jsonNoun = map[string]string{"string": "a JSON string", "number": "a JSON number", "boolean": "true or false",
	"array": "a JSON array", "map": "a JSON object of names", "object": "a JSON object", "any": "any JSON"}

// checkField checks one TypeScript member against the Go struct's field of
// the same JSON name.
func checkField(owner string, f tsField, goStruct reflect.Type, types map[string]reflect.Type) []string {
	where := owner + "." + f.name
	for goStruct.Kind() == reflect.Pointer {
		goStruct = goStruct.Elem()
	}
	i := slices.IndexFunc(jsonFields(goStruct), func(g goField) bool { return g.name == f.name })
	if i < 0 {
		return []string{fmt.Sprintf("%s: %s has no JSON field %q", where, goStruct, f.name)}
	}
	g := jsonFields(goStruct)[i]
	var errs []string
	if g.omit && !f.optional {
		errs = append(errs, fmt.Sprintf("%s: Go may leave it out (omitempty): declare it optional (%s?:)", where, f.name))
	}
	if g.typ.Kind() == reflect.Pointer && !g.omit && !slices.ContainsFunc(f.typ, func(a tsAlt) bool { return a.kind == "prim" && a.name == "null" }) {
		errs = append(errs, fmt.Sprintf("%s: Go's %s may be null: add | null", where, g.typ))
	}
	return append(errs, checkType(where, f.typ, g.typ, types)...)
}

// checkType checks that every alternative of a TypeScript type (but null)
// can hold what Go writes for t.
func checkType(where string, ts tsType, t reflect.Type, types map[string]reflect.Type) []string {
	var errs []string
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	kind := jsonKind(t)
	for _, a := range ts {
		bad := func(what string) {
			errs = append(errs, fmt.Sprintf("%s: %s, but Go's %s is %s", where, what, t, jsonNoun[kind]))
		}
		switch a.kind {
		case "prim":
			switch {
			case a.name == "null" || a.name == "unknown" || kind == "any":
			case a.name != kind:
				bad(a.name)
			}
		case "lit":
			if kind != "string" {
				bad(strconv.Quote(a.name))
			}
		case "name":
			want, ok := types[a.name]
			switch {
			case !ok || want == nil:
				errs = append(errs, fmt.Sprintf("%s: type %s is not in the contract", where, a.name))
			case want != t && reflect.PointerTo(want) != t:
				errs = append(errs, fmt.Sprintf("%s: %s is Go's %s, but the field is Go's %s", where, a.name, want, t))
			}
		case "object":
			if kind != "object" {
				bad("an object")
				continue
			}
			for _, f := range a.fields {
				errs = append(errs, checkField(where, f, t, types)...)
			}
		case "array":
			if kind != "array" {
				bad("an array")
				continue
			}
			errs = append(errs, checkType(where+"[]", a.elem, t.Elem(), types)...)
		case "record":
			if kind != "map" || t.Key().Kind() != reflect.String {
				bad("a Record<string, ...>")
				continue
			}
			errs = append(errs, checkType(where+"[name]", a.elem, t.Elem(), types)...)
		}
	}
	return errs
}

// readConst reads a constant's value: a string or number literal, or an
// array of string literals ("as const" allowed), ending with ";".
func readConst(rhs string) (any, error) {
	rhs, ok := strings.CutSuffix(strings.TrimSpace(rhs), ";")
	if !ok {
		return nil, fmt.Errorf("want one line ending in \";\"")
	}
	rhs = strings.TrimSuffix(rhs, " as const")
	if inner, ok := strings.CutPrefix(rhs, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if !ok {
			return nil, fmt.Errorf("want [\"...\", ...]")
		}
		var out []any
		for _, part := range strings.Split(inner, ",") {
			s, err := strconv.Unquote(strings.TrimSpace(part))
			if err != nil {
				return nil, fmt.Errorf("want string literals in the array")
			}
			out = append(out, s)
		}
		return out, nil
	}
	if s, err := strconv.Unquote(rhs); err == nil {
		return s, nil
	}
	if n, err := strconv.ParseFloat(rhs, 64); err == nil {
		return n, nil
	}
	return nil, fmt.Errorf("want a string or number literal, or an array of strings")
}

// normalize turns a Go value into what readConst returns for it.
func normalize(v any) any {
	switch v := v.(type) {
	case []string:
		out := make([]any, len(v))
		for i, s := range v {
			out[i] = s
		}
		return out
	case int:
		return float64(v)
	}
	return v
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func isIdent(s string) bool {
	p := &tsParser{s: s}
	return s != "" && p.ident() == s
}
