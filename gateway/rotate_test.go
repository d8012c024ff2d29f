package gateway

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rodon-compute/rodon/internal/secretbox"
)

// TestRotateRoot rotates the root key file under a gateway: the values
// still open through secretValues (the gateway rereads the file), every
// data key record is wrapped by the new key only, and the old file's
// keyset opens none of them. A data key record of the tenant store's
// form (TENANT.data) is rewrapped for its tenant.
func TestRotateRoot(t *testing.T) {
	f := newFixture(t)
	path := f.g.cfg.RootKeyFile
	f.setSecret("TOKEN", "token value")
	oldRoot, err := secretbox.LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	oldFile, _ := os.ReadFile(path)
	// Another tenant's data key, as the raw store holds it once records
	// are scoped by tenant.
	wrappedB, err := secretbox.NewDataKey(oldRoot, "acct-b")
	if err != nil {
		t.Fatal(err)
	}
	f.put(kindDataKey, "acct-b.data", dataKeyRecord{Tenant: "acct-b", Wrapped: wrappedB, Root: oldRoot.PrimaryID()})
	keyB, _ := secretbox.OpenDataKey(oldRoot, "acct-b", wrappedB)
	sealedB, _ := keyB.Seal("acct-b", "B_TOKEN", 1, "b value")

	res, err := RotateRoot(t.Context(), f.store, path)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rewrapped != 2 || res.DataKeys != 2 || !cmp.Equal(res.Dropped, []uint32{oldRoot.PrimaryID()}) || res.Primary == oldRoot.PrimaryID() {
		t.Errorf("RotateRoot = %+v, want 2 data keys rewrapped, %d dropped, a new primary", res, oldRoot.PrimaryID())
	}
	newRoot, err := secretbox.LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	if newRoot.Keys() != 1 || newRoot.PrimaryID() != res.Primary {
		t.Errorf("root key file after rotation: %d keys, primary %d; want the one key %d", newRoot.Keys(), newRoot.PrimaryID(), res.Primary)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("root key file mode after rotation = %v, want 0600", fi.Mode().Perm())
	}
	vals, err := f.g.secretValues(f.tenantCtx(), []string{"TOKEN", fixtureSecret})
	if err != nil || vals["TOKEN"] != "token value" || vals[fixtureSecret] != fixtureSecretValue {
		t.Errorf("secretValues after rotation = %v, %v; want the values", vals, err)
	}
	f.do("admin", "PUT", "/v1/secrets/TOKEN", `{"value":"after"}`, 200, nil)

	// The old file's keyset opens no data key record; the new one opens
	// every one, the other tenant's values with it.
	os.WriteFile(path+".old", oldFile, 0o600)
	oldAgain, err := secretbox.LoadRoot(path + ".old")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = eachRecord(t.Context(), f.store, kindDataKey, "", func(v versioned[dataKeyRecord]) (bool, error) {
		n++
		tenant, err := dataKeyTenant(v.ID, v.Value)
		if err != nil {
			return false, err
		}
		if _, err := secretbox.OpenDataKey(oldAgain, tenant, v.Value.Wrapped); !errors.Is(err, secretbox.ErrOpen) {
			t.Errorf("the old root key opens data key %s: %v", v.ID, err)
		}
		k, err := secretbox.OpenDataKey(newRoot, tenant, v.Value.Wrapped)
		if err != nil {
			t.Errorf("the new root key does not open data key %s: %v", v.ID, err)
		} else if v.ID == "acct-b.data" {
			if got, err := k.Open("acct-b", "B_TOKEN", 1, sealedB); err != nil || got != "b value" {
				t.Errorf("acct-b's value after rotation = %q, %v", got, err)
			}
		}
		return true, nil
	})
	if err != nil || n != 2 {
		t.Fatalf("data key records: %d, %v; want 2", n, err)
	}
}

// TestRotateRootResumes: a rotation stopped after the file got its second
// key serves secrets meanwhile, and the next rotate-root finishes it
// without adding a third key.
func TestRotateRootResumes(t *testing.T) {
	f := newFixture(t)
	path := f.g.cfg.RootKeyFile
	old, err := secretbox.LoadRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	both, err := old.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if err := secretbox.WriteRoot(path, both); err != nil {
		t.Fatal(err)
	}
	// Mid-rotation: old data keys open, new ones are wrapped by the new key.
	if _, err := f.g.secretValues(f.tenantCtx(), []string{fixtureSecret}); err != nil {
		t.Fatalf("secretValues mid-rotation: %v", err)
	}
	f.do("admin", "PUT", "/v1/secrets/MID", `{"value":"mid"}`, 201, nil)
	res, err := RotateRoot(t.Context(), f.store, path)
	if err != nil {
		t.Fatal(err)
	}
	if res.Primary != both.PrimaryID() || res.Rewrapped != 1 || !cmp.Equal(res.Dropped, []uint32{old.PrimaryID()}) {
		t.Errorf("resumed RotateRoot = %+v, want primary %d kept, 1 rewrapped, %d dropped", res, both.PrimaryID(), old.PrimaryID())
	}
	vals, err := f.g.secretValues(f.tenantCtx(), []string{fixtureSecret, "MID"})
	if err != nil || vals["MID"] != "mid" {
		t.Errorf("secretValues after the resumed rotation = %v, %v", vals, err)
	}
}

// TestRotateRootRefuses: a data key record that names another tenant than
// its id, or that no root key opens, stops the rotation with the old key
// still in the file.
func TestRotateRootRefuses(t *testing.T) {
	f := newFixture(t)
	path := f.g.cfg.RootKeyFile
	stranger, _ := secretbox.GenerateRoot()
	wrapped, _ := secretbox.NewDataKey(stranger, "acct-c")
	f.put(kindDataKey, "acct-c.data", dataKeyRecord{Tenant: "acct-c", Wrapped: wrapped})
	if _, err := RotateRoot(t.Context(), f.store, path); err == nil {
		t.Fatal("RotateRoot with a data key no root key opens succeeded")
	}
	root, _ := secretbox.LoadRoot(path)
	if root.Keys() != 2 {
		t.Errorf("after a stopped rotation the file has %d keys, want both", root.Keys())
	}
	if _, err := f.g.secretValues(f.tenantCtx(), []string{fixtureSecret}); err != nil {
		t.Errorf("secretValues after a stopped rotation: %v", err)
	}
	if _, err := dataKeyTenant("acct-d.data", dataKeyRecord{Tenant: "acct-e"}); err == nil {
		t.Error("dataKeyTenant accepted a record naming another tenant than its id")
	}
}
