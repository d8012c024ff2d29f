package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if code, _, stderr := sh("tls", "init", "--dir", dir); code != exitError || !strings.Contains(stderr, "already exists") {
		t.Errorf("second tls init = %d, %q; want %d naming the existing CA", code, stderr, exitError)
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
	if code, _, stderr := sh("tls", "show", "--cert", filepath.Join(dir, "agent-n1.crt"), "--ca", filepath.Join(other, "ca.crt")); code != exitError || !strings.Contains(stderr, "not valid under the cluster CA") {
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
		if code, _, stderr := sh(tc.args...); code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("run(%q) = %d, %q; want %d naming %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	if code, _, stderr := sh("tls", "issue", "--role", "agent", "--name", "n2", "--dir", t.TempDir()); code != exitError || !strings.Contains(stderr, "tls init") {
		t.Errorf("tls issue without a CA = %d, %q; want a hint to run tls init", code, stderr)
	}
}
