package gateway

import (
	"context"
	"fmt"
	"strings"

	"github.com/rodon-compute/rodon/internal/secretbox"
)

// RotateResult says what RotateRoot did.
type RotateResult struct {
	// Primary is the id of the new root key; Dropped the ids of the keys
	// removed from the file (not secret).
	Primary uint32
	Dropped []uint32
	// Rewrapped counts the data keys wrapped again; DataKeys is how many
	// there are, all wrapped by the new key at the end.
	Rewrapped, DataKeys int
}

// rotatePasses bounds the passes over the data keys: a pass that finds
// nothing to rewrap ends the rotation.
const rotatePasses = 3

// RotateRoot rotates the root key file at path (`gateway keys
// rotate-root`; docs/design/tenants.md, "Secrets"), on store, the raw
// record store of every tenant. Its steps keep every secret readable:
//
//  1. A new AES-256-GCM key is added to the keyset as its primary, and
//     the file rewritten (atomically) with both keys. A gateway rereads
//     the file when it changes: from then on it wraps new data keys with
//     the new key, and opens data keys wrapped by either.
//  2. Every tenant's data key record (kind data_key, any tenant) not yet
//     wrapped by the new key is unwrapped and wrapped again with it, by
//     compare-and-set (a lost one is read again and retried). The tenant
//     is the id's prefix before its first '.' (the tenant store's
//     TENANT.data), which must match the record's own; an id without a
//     prefix takes the record's. Passes repeat until one finds nothing to
//     rewrap.
//  3. The file is rewritten with the new key only: a copy of the old file
//     opens no data key any more.
//
// A file that already holds several keys is a rotation that stopped
// between 1 and 3: RotateRoot goes on with it instead of adding another
// key. A data key neither key opens stops the rotation before step 3,
// with an error naming it; the file then still has both keys.
func RotateRoot(ctx context.Context, store Store, path string) (RotateResult, error) {
	var res RotateResult
	root, err := secretbox.LoadRoot(path)
	if err != nil {
		return res, err
	}
	both := root
	if root.Keys() == 1 {
		if both, err = root.Rotate(); err != nil {
			return res, err
		}
		if err := secretbox.WriteRoot(path, both); err != nil {
			return res, err
		}
	}
	only, err := both.WithoutOld()
	if err != nil {
		return res, err
	}
	res.Primary = only.PrimaryID()
	for pass := 0; ; pass++ {
		if pass == rotatePasses {
			return res, fmt.Errorf("data keys were still being wrapped by an old root key after %d passes: a gateway reads another root key file? "+
				"run rotate-root again once every gateway has %s", rotatePasses, path)
		}
		rewrapped, current := 0, 0
		err := eachRecord(ctx, store, kindDataKey, "", func(v versioned[dataKeyRecord]) (bool, error) {
			did, err := rewrapDataKey(ctx, store, both, only, v)
			if did {
				rewrapped++
			} else if err == nil {
				current++
			}
			return true, err
		})
		if err != nil {
			return res, err
		}
		res.Rewrapped += rewrapped
		if rewrapped == 0 {
			res.DataKeys = current
			break
		}
	}
	for _, k := range both.KeyIDs() {
		if k != res.Primary {
			res.Dropped = append(res.Dropped, k)
		}
	}
	return res, secretbox.WriteRoot(path, only)
}

// rewrapDataKey wraps the data key of v with only's key unless it is
// already; it reports whether it wrote the record.
func rewrapDataKey(ctx context.Context, store Store, both, only *secretbox.Root, v versioned[dataKeyRecord]) (bool, error) {
	id, version, rec := v.ID, v.Version, v.Value
	for range 5 {
		tenant, err := dataKeyTenant(id, rec)
		if err != nil {
			return false, err
		}
		if _, err := secretbox.OpenDataKey(only, tenant, rec.Wrapped); err == nil {
			return false, nil
		}
		wrapped, err := secretbox.Rewrap(both, tenant, rec.Wrapped)
		if err != nil {
			return false, fmt.Errorf("data key record %s (root key %d): %w; the rotation stops here, the file keeps both keys", id, rec.Root, err)
		}
		rec.Wrapped, rec.Root = wrapped, only.PrimaryID()
		_, err = putRecord(ctx, store, kindDataKey, id, version, &rec)
		if err == nil {
			return true, nil
		}
		if !IsConflict(err) {
			return false, err
		}
		rec = dataKeyRecord{}
		version, err = getRecord(ctx, store, kindDataKey, id, &rec)
		if IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("data key record %s keeps changing: run rotate-root again", id)
}

// dataKeyTenant is the tenant a data key record id of the raw store
// belongs to: the prefix of TENANT.data, or the record's own for an id
// without one.
func dataKeyTenant(id string, rec dataKeyRecord) (string, error) {
	prefix, _, ok := strings.Cut(id, ".")
	switch {
	case ok && rec.Tenant != "" && rec.Tenant != prefix:
		return "", fmt.Errorf("data key record %s names tenant %q: refusing to rewrap it", id, rec.Tenant)
	case ok:
		return prefix, nil
	case rec.Tenant == "":
		return "", fmt.Errorf("data key record %s names no tenant", id)
	}
	return rec.Tenant, nil
}
