package agentloop

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// python3 is the interpreter agent.py runs with (scripts/install-deps
// installs it). A test without one skips, saying so, but under CI=true,
// where a missing component is a failure.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	switch {
	case err != nil && testenv.InCI():
		t.Fatal("python3 is not installed (scripts/install-deps installs it): agent.py cannot run")
	case err != nil:
		t.Skip("python3 is not installed: agent.py cannot run")
	}
	return p
}

// schema is the part of a tool's JSON schema the test compares.
type schema struct {
	Type       string             `json:"type"`
	Properties map[string]*schema `json:"properties"`
	Required   []string           `json:"required"`
	Items      *schema            `json:"items"`
	Additional *bool              `json:"additionalProperties"`
}

// schemaOf is the schema a Go input type means: its JSON fields, those
// without omitempty required, no others allowed.
func schemaOf(t reflect.Type) *schema {
	switch t.Kind() {
	case reflect.Struct:
		no := false
		s := &schema{Type: "object", Properties: map[string]*schema{}, Additional: &no}
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			s.Properties[name] = schemaOf(f.Type)
			if !strings.Contains(opts, "omitempty") {
				s.Required = append(s.Required, name)
			}
		}
		return s
	case reflect.Slice:
		return &schema{Type: "array", Items: schemaOf(t.Elem())}
	case reflect.String:
		return &schema{Type: "string"}
	case reflect.Bool:
		return &schema{Type: "boolean"}
	case reflect.Int, reflect.Int64:
		if t == reflect.TypeFor[api.Duration]() {
			return &schema{Type: "string"} // "30s"
		}
		return &schema{Type: "integer"}
	}
	panic("no schema for " + t.String())
}

// TestToolsMatchTheAPI: the tool list agent.py gives a model is api.Tools,
// in order, and each input schema is the Go input type's: the same
// fields, the same required ones, nothing else allowed (the gateway
// decodes inputs strictly).
func TestToolsMatchTheAPI(t *testing.T) {
	out, err := exec.Command(python3(t), "agent.py", "--print-tools").Output()
	if err != nil {
		t.Fatalf("agent.py --print-tools: %v", err)
	}
	var tools []struct {
		Name        string  `json:"name"`
		Description string  `json:"description"`
		InputSchema *schema `json:"input_schema"`
	}
	if err := json.Unmarshal(out, &tools); err != nil {
		t.Fatalf("agent.py --print-tools: %v\n%s", err, out)
	}
	inputs := map[string]reflect.Type{
		api.ToolRead: reflect.TypeFor[api.ReadInput](), api.ToolGlob: reflect.TypeFor[api.GlobInput](),
		api.ToolGrep: reflect.TypeFor[api.GrepInput](), api.ToolWrite: reflect.TypeFor[api.WriteInput](),
		api.ToolEdit: reflect.TypeFor[api.EditInput](), api.ToolBash: reflect.TypeFor[api.BashInput](),
		api.ToolProposeChange: reflect.TypeFor[api.ProposeChangeInput](), api.ToolApplyChange: reflect.TypeFor[api.ApplyChangeInput](),
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
		in, ok := inputs[tool.Name]
		if !ok {
			continue
		}
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		// Descriptions are for the model; the comparison is of shapes.
		if diff := cmp.Diff(schemaOf(in), tool.InputSchema); diff != "" {
			t.Errorf("tool %s: input schema against api.%s (-api +agent.py):\n%s", tool.Name, in.Name(), diff)
		}
	}
	if !slices.Equal(names, api.Tools) {
		t.Errorf("agent.py's tools = %q, want api.Tools %q", names, api.Tools)
	}
}
