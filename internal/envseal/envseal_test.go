package envseal_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rodon-compute/rodon/internal/envseal"
)

func TestSealOpen(t *testing.T) {
	k, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	other, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	const value = "hunter2-marker"
	ct, err := k.Seal(envseal.ForStep, "s-1", "TOKEN", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ct, []byte(value)) {
		t.Fatalf("Seal() = %q, holds the value", ct)
	}
	if got, err := k.Open(envseal.ForStep, "s-1", "TOKEN", ct); err != nil || got != value {
		t.Fatalf("Open() = %q, %v, want %q", got, err, value)
	}
	tampered := bytes.Clone(ct)
	tampered[len(tampered)-1] ^= 1
	truncated := ct[:len(ct)-1]
	for _, tc := range []struct {
		name    string
		key     *envseal.Key
		purpose envseal.Purpose
		step    string
		varName string
		sealed  []byte
	}{
		{"wrong key", other, envseal.ForStep, "s-1", "TOKEN", ct},
		{"tampered ciphertext", k, envseal.ForStep, "s-1", "TOKEN", tampered},
		{"truncated ciphertext", k, envseal.ForStep, "s-1", "TOKEN", truncated},
		{"empty ciphertext", k, envseal.ForStep, "s-1", "TOKEN", nil},
		{"other step", k, envseal.ForStep, "s-2", "TOKEN", ct},
		{"other name", k, envseal.ForStep, "s-1", "OTHER", ct},
		{"other purpose", k, envseal.ForSubmit, "s-1", "TOKEN", ct},
		// The associated data cannot be shifted between fields.
		{"shifted binding", k, envseal.ForStep, "s-1\"TOKEN", "", ct},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.key.Open(tc.purpose, tc.step, tc.varName, tc.sealed)
			if !errors.Is(err, envseal.ErrOpen) || got != "" {
				t.Errorf("Open() = %q, %v, want ErrOpen", got, err)
			}
		})
	}
}

func TestSealIsRandomized(t *testing.T) {
	k, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := k.Seal(envseal.ForStep, "s-1", "A", "same")
	b, _ := k.Seal(envseal.ForStep, "s-1", "A", "same")
	if bytes.Equal(a, b) {
		t.Errorf("two seals of one value are equal: %x", a)
	}
}

func TestCreateLoadRotate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tls", envseal.KeyFile)
	if err := envseal.Create(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("Stat(%s) = %v, %v, want mode 0600", path, fi, err)
	}
	if err := envseal.Create(path); !errors.Is(err, envseal.ErrExists) {
		t.Fatalf("Create() again = %v, want ErrExists", err)
	}
	k1, err := envseal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	old, err := k1.Seal(envseal.ForStep, "s-1", "A", "before rotation")
	if err != nil {
		t.Fatal(err)
	}
	id, err := envseal.Rotate(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := envseal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if k2.PrimaryID() != id || id == k1.PrimaryID() {
		t.Errorf("after Rotate() = %d, primary %d (was %d), want the new key", id, k2.PrimaryID(), k1.PrimaryID())
	}
	if got, err := k2.Open(envseal.ForStep, "s-1", "A", old); err != nil || got != "before rotation" {
		t.Errorf("rotated key opens the old value as %q, %v", got, err)
	}
	fresh, err := k2.Seal(envseal.ForStep, "s-1", "A", "after rotation")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k1.Open(envseal.ForStep, "s-1", "A", fresh); !errors.Is(err, envseal.ErrOpen) {
		t.Errorf("the old keyset opens a value sealed with the new primary: %v", err)
	}
}

func TestLoadRefusesGarbage(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty":     "",
		"not json":  "hello",
		"no keys":   `{"primaryKeyId": 1, "key": []}`,
		"wrong doc": `{"a": 1}`,
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(content), 0o600)
		if _, err := envseal.Load(path); err == nil {
			t.Errorf("Load(%s) = nil error", name)
		}
	}
	if _, err := envseal.Load(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestExportSave(t *testing.T) {
	k, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := k.Seal(envseal.ForStep, "s1", "A", "v")
	if err != nil {
		t.Fatal(err)
	}
	data, err := k.Export()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), envseal.KeyFile)
	saved, err := envseal.Save(path, data)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := saved.Open(envseal.ForStep, "s1", "A", sealed); err != nil || v != "v" {
		t.Errorf("Open with the saved key = %q, %v; want the value", v, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("saved key file: %v, %v; want mode 0600", fi, err)
	}
	if _, err := envseal.Save(path, data); !errors.Is(err, envseal.ErrExists) {
		t.Errorf("Save over an existing file = %v, want envseal.ErrExists", err)
	}
	if _, err := envseal.Save(filepath.Join(t.TempDir(), envseal.KeyFile), []byte(`{"key":[]}`)); err == nil {
		t.Error("Save of an empty keyset = nil error")
	}
}
