package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRunscPath(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	wrap := filepath.Join(root, "libexec", "rodon-runsc")
	for _, d := range []string{bin, wrap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self := filepath.Join(bin, "containerd-shim-rodon-v1")
	real := filepath.Join(bin, "runsc")
	if err := os.WriteFile(real, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Without rodon-runsc nothing changes.
	t.Setenv("PATH", bin+":/usr/bin")
	t.Setenv("RODON_RUNSC", "")
	runscPath(self)
	if got := os.Getenv("PATH"); got != bin+":/usr/bin" || os.Getenv("RODON_RUNSC") != "" {
		t.Fatalf("no wrapper: PATH %q, RODON_RUNSC %q", got, os.Getenv("RODON_RUNSC"))
	}

	if err := os.WriteFile(filepath.Join(wrap, "runsc"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := wrap + ":" + bin + ":/usr/bin"
	for range 2 { // the daemon runs it again with the start's environment
		runscPath(self)
		if got := os.Getenv("PATH"); got != want {
			t.Fatalf("PATH %q, want %q", got, want)
		}
		if got := os.Getenv("RODON_RUNSC"); got != real {
			t.Fatalf("RODON_RUNSC %q, want the real runsc %q", got, real)
		}
	}
}
