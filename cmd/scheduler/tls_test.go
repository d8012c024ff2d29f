package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/envseal"
)

func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	sh := func(args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, _, stderr := sh("tls", "init", "--dir", dir); code != 0 {
		t.Fatalf("tls init = %d, %s", code, stderr)
	}
	if code, _, stderr := sh("tls", "init", "--dir", dir); code != cli.ExitError || !strings.Contains(stderr, "already exists") {
		t.Errorf("second tls init = %d, %q; want %d naming the existing CA", code, stderr, cli.ExitError)
	}
	if code, out, stderr := sh("tls", "issue", "--role", "agent", "--name", "n1", "--dir", dir); code != 0 || !strings.Contains(out, "issued agent/n1") {
		t.Fatalf("tls issue = %d, %q, %q", code, out, stderr)
	}
	first, err := os.ReadFile(filepath.Join(dir, "agent-n1.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if code, out, _ := sh("tls", "issue", "--role", "agent", "--name", "n1", "--dir", dir, "--renew-within", "240h"); code != 0 || !strings.Contains(out, "kept agent/n1") {
		t.Errorf("tls issue --renew-within 240h of a fresh pair = %d, %q; want it kept", code, out)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "agent-n1.crt")); !bytes.Equal(again, first) {
		t.Error("--renew-within replaced a pair it reported kept")
	}
	if code, out, _ := sh("tls", "issue", "--role", "agent", "--name", "n1", "--dir", dir, "--renew-within", "2400h"); code != 0 || !strings.Contains(out, "issued") {
		t.Errorf("tls issue --renew-within longer than the lifetime = %d, %q; want a new pair", code, out)
	}
	if code, out, stderr := sh("tls", "show", "--cert", filepath.Join(dir, "agent-n1.crt")); code != 0 || !strings.HasPrefix(out, "agent/n1\tspiffe://rodon/agent/n1\t") {
		t.Errorf("tls show = %d, %q, %q", code, out, stderr)
	}
	other := t.TempDir()
	sh("tls", "init", "--dir", other)
	if code, _, stderr := sh("tls", "show", "--cert", filepath.Join(dir, "agent-n1.crt"), "--ca", filepath.Join(other, "ca.crt")); code != cli.ExitError || !strings.Contains(stderr, "not valid under the cluster CA") {
		t.Errorf("tls show under another CA = %d, %q; want a refusal", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tls"}, "want init or issue"},
		{[]string{"tls", "bogus"}, `unknown tls command "bogus"`},
		{[]string{"tls", "issue", "--role", "boss", "--name", "x", "--dir", dir}, "--role"},
		{[]string{"tls", "issue", "--role", "agent", "--name", "N1", "--dir", dir}, "--name"},
		{[]string{"tls", "issue", "--role", "agent", "--name", "n1", "--dir", dir, "--valid-for", "10000h"}, "--valid-for"},
		{[]string{"tls", "show"}, "--cert is required"},
	} {
		if code, _, stderr := sh(tc.args...); code != cli.ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("run(%q) = %d, %q; want %d naming %q", tc.args, code, stderr, cli.ExitUsage, tc.want)
		}
	}
	if code, _, stderr := sh("tls", "issue", "--role", "agent", "--name", "n2", "--dir", t.TempDir()); code != cli.ExitError || !strings.Contains(stderr, "tls init") {
		t.Errorf("tls issue without a CA = %d, %q; want a hint to run tls init", code, stderr)
	}
}

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
			"--http-addr", freePort(t), "--bootstrap", "--plaintext", "--env-key", path}, &stdout, &stderr)
		if code != cli.ExitUsage || !strings.Contains(stderr.String(), "--env-key "+path) {
			t.Errorf("serve --env-key %s = %d, stderr %q; want a usage error naming the flag", path, code, stderr.String())
		}
	}
}
