package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/internal/envseal"
)

// TestTLSInitMakesEnvKey: tls init makes the env key beside the CA, adds
// it to a directory made before it existed, and refuses to replace both;
// rotate-env-key keeps what the old key sealed open.
func TestTLSInitMakesEnvKey(t *testing.T) {
	dir := t.TempDir()
	tls := func(args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"tls"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := tls("init", "--dir", dir); code != 0 || !strings.Contains(out, "env key") {
		t.Fatalf("tls init = %d %q %q", code, out, errOut)
	}
	keyPath := filepath.Join(dir, envseal.KeyFile)
	k, err := envseal.Load(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := tls("init", "--dir", dir); code == 0 || !strings.Contains(errOut, "keep them") {
		t.Errorf("tls init again = %d %q, want a refusal", code, errOut)
	}
	// A CA made before the env key existed.
	os.Remove(keyPath)
	if code, out, errOut := tls("init", "--dir", dir); code != 0 || !strings.Contains(out, "created the env key") || strings.Contains(out, "cluster CA") {
		t.Fatalf("tls init with a CA and no env key = %d %q %q, want the env key only", code, out, errOut)
	}
	if k, err = envseal.Load(keyPath); err != nil {
		t.Fatal(err)
	}
	sealed, _ := k.Seal(envseal.ForStep, "s1", "A", "v")
	if code, out, errOut := tls("rotate-env-key", "--dir", dir); code != 0 || !strings.Contains(out, "primary") {
		t.Fatalf("tls rotate-env-key = %d %q %q", code, out, errOut)
	}
	rotated, err := envseal.Load(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.PrimaryID() == k.PrimaryID() {
		t.Error("rotate-env-key kept the primary key")
	}
	if v, err := rotated.Open(envseal.ForStep, "s1", "A", sealed); err != nil || v != "v" {
		t.Errorf("the rotated key opens an old value as %q, %v", v, err)
	}
	if code, _, errOut := tls("rotate-env-key", "--dir", t.TempDir()); code == 0 || !strings.Contains(errOut, "tls init") {
		t.Errorf("rotate-env-key without a key = %d %q, want an error pointing at tls init", code, errOut)
	}
}

func TestServeEnvKeyFlag(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "garbage.json")
	os.WriteFile(bad, []byte("{}"), 0o600)
	for _, path := range []string{filepath.Join(dir, "missing.json"), bad} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"serve", "--node-id", "m1", "--data-dir", t.TempDir(), "--raft-addr", freePort(t),
			"--http-addr", freePort(t), "--bootstrap", "--env-key", path}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--env-key "+path) {
			t.Errorf("serve --env-key %s = %d, stderr %q; want a usage error naming the flag", path, code, stderr.String())
		}
	}
}
