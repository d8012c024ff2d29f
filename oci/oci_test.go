package oci

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestSpecGolden(t *testing.T) {
	tests := []struct {
		name string
		opts []SpecOpt
	}{
		{name: "hardened"},
		{name: "step", opts: []SpecOpt{
			WithPodSandbox(),
			WithPause("/opt/rodon/bin/rodon-pause", "/var/lib/rodon/agentd/ctl/s-1"),
			WithEnv([]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}),
			WithWorkspace("/var/lib/rodon/agentd/workspaces/s-1"),
			WithLimits(Limits{CPU: 1.5, MemoryBytes: 512 << 20, Pids: 128}),
			WithCgroupsPath("/rodon/s-1"),
			WithNetNS("/run/netns/rodon-s-1"),
			WithResolvConf("/var/lib/rodon/agentd/net/s-1/resolv.conf"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Spec(t.Context(), "rodon", "s-1", tt.opts...)
			if err != nil {
				t.Fatalf("Spec() = %v", err)
			}
			got, err := json.MarshalIndent(s, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tt.name+".json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if diff := cmp.Diff(strings.TrimSpace(string(want)), string(got)); diff != "" {
				t.Errorf("Spec(%s) mismatch (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}

func TestHardenedInvariants(t *testing.T) {
	s, err := Spec(t.Context(), "rodon", "s-2", WithWorkspace("/w"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Root.Readonly {
		t.Errorf("Root.Readonly = false, want true")
	}
	if !s.Process.NoNewPrivileges {
		t.Errorf("NoNewPrivileges = false, want true")
	}
	c := s.Process.Capabilities
	if n := len(c.Bounding) + len(c.Effective) + len(c.Permitted) + len(c.Inheritable) + len(c.Ambient); n != 0 {
		t.Errorf("capabilities = %+v, want none", c)
	}
	var ws bool
	for _, m := range s.Mounts {
		if m.Destination == WorkspacePath && m.Source == "/w" {
			ws = true
		}
	}
	if !ws {
		t.Errorf("no workspace mount in %+v", s.Mounts)
	}
	if s.Process.Cwd != WorkspacePath {
		t.Errorf("Cwd = %q, want %q", s.Process.Cwd, WorkspacePath)
	}
}

// TestLibraryReadOnly: the library is a read-only bind mount, and no
// library is no mount.
func TestLibraryReadOnly(t *testing.T) {
	s, err := Spec(t.Context(), "rodon", "s-3", WithLibrary("/lib"))
	if err != nil {
		t.Fatal(err)
	}
	var lib []string
	for _, m := range s.Mounts {
		if m.Destination == LibraryPath && m.Source == "/lib" {
			lib = m.Options
		}
	}
	if !slices.Contains(lib, "ro") || slices.Contains(lib, "rw") {
		t.Errorf("library mount options %q, want read-only", lib)
	}
	s, err = Spec(t.Context(), "rodon", "s-4", WithLibrary(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Mounts {
		if m.Destination == LibraryPath {
			t.Errorf("a library mount without a library: %+v", m)
		}
	}
	if _, err := Spec(t.Context(), "rodon", "s-5", WithLibrary("lib")); err == nil {
		t.Error("a relative library path was accepted")
	}
}

// TestReadOnlyWorkspace: WithReadOnlyWorkspace is the workspace mount,
// read-only, and still the working directory.
func TestReadOnlyWorkspace(t *testing.T) {
	for _, tc := range []struct {
		opt  SpecOpt
		want string
	}{{WithWorkspace("/w"), "rw"}, {WithReadOnlyWorkspace("/w"), "ro"}} {
		s, err := Spec(t.Context(), "rodon", "s-6", tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		var opts []string
		for _, m := range s.Mounts {
			if m.Destination == WorkspacePath && m.Source == "/w" {
				opts = m.Options
			}
		}
		if !slices.Contains(opts, tc.want) || slices.Contains(opts, map[string]string{"rw": "ro", "ro": "rw"}[tc.want]) || s.Process.Cwd != WorkspacePath {
			t.Errorf("workspace mount options %q, cwd %q; want %s, cwd %s", opts, s.Process.Cwd, tc.want, WorkspacePath)
		}
	}
	if _, err := Spec(t.Context(), "rodon", "s-7", WithReadOnlyWorkspace("w")); err == nil {
		t.Error("a relative workspace path was accepted")
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		l       Limits
		wantErr string
	}{
		{Limits{}, ""},
		{Limits{CPU: 0.5, MemoryBytes: 64 << 20, Pids: 64}, ""},
		{Limits{CPU: -1}, "cpu limit"},
		{Limits{CPU: 0.001}, "cpu limit"},
		{Limits{MemoryBytes: -5}, "memory limit"},
		{Limits{MemoryBytes: 1 << 20}, "memory limit"},
		{Limits{Pids: -1}, "pids limit"},
		{Limits{Pids: 2}, "pids limit"},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%+v.Validate() = %v, want nil", tt.l, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%+v.Validate() = %v, want error containing %q", tt.l, err, tt.wantErr)
		}
	}
}

func TestProcess(t *testing.T) {
	pod, err := Spec(t.Context(), "rodon", "s-3", WithEnv([]string{"A=1", "B=2"}), WithLimits(Limits{Pids: 32}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Process(pod, []string{"sh", "-c", "exit 7"}, []string{"B=3", "C=4"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sh", "-c", "exit 7"}, p.Args); diff != "" {
		t.Errorf("Args mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"A=1", "B=3", "C=4"}, p.Env); diff != "" {
		t.Errorf("Env mismatch (-want +got):\n%s", diff)
	}
	if !p.NoNewPrivileges || len(p.Capabilities.Bounding) != 0 {
		t.Errorf("Process() lost hardening: %+v", p)
	}
	if pod.Process.Env[1] != "B=2" {
		t.Errorf("Process() changed the pod spec: env %v", pod.Process.Env)
	}
	if _, err := Process(pod, nil, nil); err == nil {
		t.Errorf("Process(empty args) = nil error, want one")
	}
}
