package secretbox

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func mustRoot(t *testing.T) *Root {
	t.Helper()
	r, err := GenerateRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustDataKey(t *testing.T, root *Root, tenant string) ([]byte, *DataKey) {
	t.Helper()
	wrapped, err := NewDataKey(root, tenant)
	if err != nil {
		t.Fatal(err)
	}
	k, err := OpenDataKey(root, tenant, wrapped)
	if err != nil {
		t.Fatal(err)
	}
	return wrapped, k
}

func TestSealOpen(t *testing.T) {
	root := mustRoot(t)
	_, k := mustDataKey(t, root, "acct-a")
	sealed, err := k.Seal("acct-a", "API_KEY", 2, "s3cret value")
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.Open("acct-a", "API_KEY", 2, sealed)
	if err != nil || got != "s3cret value" {
		t.Fatalf("Open = %q, %v, want the value", got, err)
	}
	_, other := mustDataKey(t, root, "acct-a")
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for _, tc := range []struct {
		name    string
		k       *DataKey
		tenant  string
		secret  string
		version int
		sealed  []byte
	}{
		{"wrong tenant", k, "acct-b", "API_KEY", 2, sealed},
		{"wrong name", k, "acct-a", "API_KEYS", 2, sealed},
		{"wrong version", k, "acct-a", "API_KEY", 1, sealed},
		{"another data key", other, "acct-a", "API_KEY", 2, sealed},
		{"tampered", k, "acct-a", "API_KEY", 2, tampered},
		{"truncated", k, "acct-a", "API_KEY", 2, sealed[:len(sealed)-1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.k.Open(tc.tenant, tc.secret, tc.version, tc.sealed)
			if !errors.Is(err, ErrOpen) {
				t.Errorf("Open = %q, %v, want ErrOpen", got, err)
			}
		})
	}
}

func TestOpenDataKey(t *testing.T) {
	root := mustRoot(t)
	wrapped, _ := mustDataKey(t, root, "acct-a")
	tampered := bytes.Clone(wrapped)
	tampered[len(tampered)/2] ^= 1
	for _, tc := range []struct {
		name    string
		root    *Root
		tenant  string
		wrapped []byte
	}{
		{"wrong tenant", root, "acct-b", wrapped},
		{"tenant prefix", root, "acct-", wrapped},
		{"wrong root", mustRoot(t), "acct-a", wrapped},
		{"tampered", root, "acct-a", tampered},
		{"empty", root, "acct-a", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := OpenDataKey(tc.root, tc.tenant, tc.wrapped); !errors.Is(err, ErrOpen) {
				t.Errorf("OpenDataKey = %v, want ErrOpen", err)
			}
		})
	}
}

func TestRootFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "root-key.json")
	if err := CreateRoot(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("root key file mode = %v, want 0600", fi.Mode().Perm())
	}
	if err := CreateRoot(path); !errors.Is(err, ErrExists) {
		t.Errorf("CreateRoot over an existing file = %v, want ErrExists", err)
	}
	root, err := LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	wrapped, _ := mustDataKey(t, root, "acct-a")
	again, err := LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDataKey(again, "acct-a", wrapped); err != nil {
		t.Errorf("a reloaded root key does not open its data key: %v", err)
	}
	os.WriteFile(path, []byte("{}"), 0o600)
	if _, err := LoadRoot(path); err == nil {
		t.Error("LoadRoot of a file that is no keyset succeeded")
	}
}

// TestRotate follows a rotation: add a primary, rewrap, drop the old key.
// Values sealed before open after; the old root opens nothing rewrapped.
func TestRotate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "root-key.json")
	old := mustRoot(t)
	if err := WriteRoot(path, old); err != nil {
		t.Fatal(err)
	}
	oldFile, _ := os.ReadFile(path)
	wrapped, k := mustDataKey(t, old, "acct-a")
	sealed, _ := k.Seal("acct-a", "TOKEN", 1, "v1")

	both, err := old.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if both.Keys() != 2 || both.PrimaryID() == old.PrimaryID() {
		t.Fatalf("Rotate: %d keys, primary %d (old %d), want 2 and a new primary", both.Keys(), both.PrimaryID(), old.PrimaryID())
	}
	// During the rotation, data keys wrapped by the old primary open.
	if _, err := OpenDataKey(both, "acct-a", wrapped); err != nil {
		t.Fatalf("mid-rotation: %v", err)
	}
	rewrapped, err := Rewrap(both, "acct-a", wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Rewrap(both, "acct-b", wrapped); !errors.Is(err, ErrOpen) {
		t.Errorf("Rewrap for another tenant = %v, want ErrOpen", err)
	}
	only, err := both.WithoutOld()
	if err != nil {
		t.Fatal(err)
	}
	if only.Keys() != 1 || only.PrimaryID() != both.PrimaryID() {
		t.Fatalf("WithoutOld: %d keys, primary %d, want the one new key %d", only.Keys(), only.PrimaryID(), both.PrimaryID())
	}
	if err := WriteRoot(path, only); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := OpenDataKey(loaded, "acct-a", rewrapped)
	if err != nil {
		t.Fatalf("the rotated root does not open the rewrapped data key: %v", err)
	}
	if got, err := k2.Open("acct-a", "TOKEN", 1, sealed); err != nil || got != "v1" {
		t.Errorf("after rotation Open = %q, %v, want v1", got, err)
	}
	if _, err := OpenDataKey(loaded, "acct-a", wrapped); !errors.Is(err, ErrOpen) {
		t.Errorf("the rotated root opens a data key wrapped by the dropped key: %v", err)
	}
	// A copy of the old file opens nothing rewrapped.
	oldPath := filepath.Join(dir, "old.json")
	os.WriteFile(oldPath, oldFile, 0o600)
	oldLoaded, err := LoadRoot(oldPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDataKey(oldLoaded, "acct-a", rewrapped); !errors.Is(err, ErrOpen) {
		t.Errorf("the old root file opens the rewrapped data key: %v", err)
	}
}

// TestNoValueInOutput: neither the value nor its encodings appear in a
// sealed value, a wrapped key or the root file.
func TestNoValueInOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "root-key.json")
	if err := CreateRoot(path); err != nil {
		t.Fatal(err)
	}
	root, err := LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	wrapped, k := mustDataKey(t, root, "acct-a")
	value := make([]byte, 32)
	rand.Read(value)
	v := base64.StdEncoding.EncodeToString(value)
	sealed, err := k.Seal("acct-a", "V", 1, v)
	if err != nil {
		t.Fatal(err)
	}
	rootFile, _ := os.ReadFile(path)
	for what, out := range map[string][]byte{"sealed": sealed, "wrapped": wrapped, "root file": rootFile} {
		for _, form := range [][]byte{[]byte(v), value, []byte(hex.EncodeToString([]byte(v)))} {
			if bytes.Contains(out, form) {
				t.Errorf("%s holds the value", what)
			}
		}
		if bytes.Contains(out, value[:8]) {
			t.Errorf("%s holds part of the value", what)
		}
	}
}
