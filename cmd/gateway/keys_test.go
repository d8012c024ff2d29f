package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/secretbox"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// TestKeysRoot: init-root makes the file once; rotate-root leaves it with
// one new key.
func TestKeysRoot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "root-key.json")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"keys", "init-root", "--root-key-file", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("keys init-root = %d, %s", code, stderr.String())
	}
	old, err := secretbox.LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"keys", "init-root", "--root-key-file", path}, &stdout, &stderr); code != cli.ExitError || !strings.Contains(stderr.String(), "exists already") {
		t.Errorf("keys init-root over a file = %d, %s; want it refused", code, stderr.String())
	}
	store := schedulertest.New(t, schedulertest.Options{}).Client()
	stdout.Reset()
	if err := rotateRoot(t.Context(), store, path, &stdout); err != nil {
		t.Fatal(err)
	}
	root, err := secretbox.LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	if root.Keys() != 1 || root.PrimaryID() == old.PrimaryID() || !strings.Contains(stdout.String(), "0 data keys") {
		t.Errorf("after rotate-root: %d keys, primary %d (was %d), said %q", root.Keys(), root.PrimaryID(), old.PrimaryID(), stdout.String())
	}
}
