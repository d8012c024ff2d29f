package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Migration of a cluster made before tenants (docs/design/tenants.md):
// its scoped records, stored under their bare ids, move to one tenant
// named "default"; a member record that holds a password hash (it was the
// person too) is split into the global person and the membership; keys
// get their key_tenant entry and sign-ins their tenant. Every gateway runs
// it when it starts, before it serves; each move is a create of the new
// record (a conflict: another gateway made it) and a compare-and-set
// delete of the old one, so gateways racing move each record once, and a
// pass cut short is finished by the next start. Done, it leaves a marker
// so that later starts read one record.

// Bootstrap-kind records of the migration: the marker that it is done,
// and the default tenant's id (created once, agreed by compare-and-set).
const (
	migratedID      = "tenants-migrated"
	migrateTenantID = "tenants-default"
)

// migrateRecord is the value of both migration records.
type migrateRecord struct {
	Tenant string    `json:"tenant,omitempty"`
	At     time.Time `json:"at"`
}

// migrate moves the records of raw made before tenants into the tenant
// named "default" (made if there are any). It is idempotent.
func migrate(ctx context.Context, raw Store, now time.Time) error {
	if _, err := raw.GetRecord(ctx, kindBootstrap, migratedID); err == nil {
		return nil
	} else if !IsNotFound(err) {
		return fmt.Errorf("read the migration marker: %w", err)
	}
	kinds := make([]string, 0, len(scopedKinds))
	for k := range scopedKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	tenant := ""
	for _, kind := range kinds {
		var old []api.Record
		err := eachRecord(ctx, raw, kind, "", func(r versioned[json.RawMessage]) (bool, error) {
			if _, _, ok := splitTenant(r.ID); !ok {
				old = append(old, api.Record{Kind: kind, ID: r.ID, Version: r.Version, Value: r.Value})
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("list %s records: %w", kind, err)
		}
		if len(old) == 0 {
			continue
		}
		if tenant == "" {
			if tenant, err = migrateTenant(ctx, raw, now); err != nil {
				return err
			}
		}
		for _, r := range old {
			if err := migrateOne(ctx, raw, tenant, r, now); err != nil {
				return fmt.Errorf("move %s record %s to account %s: %w", r.Kind, r.ID, tenant, err)
			}
		}
	}
	if tenant != "" {
		if err := migrateSignins(ctx, raw, tenant); err != nil {
			return err
		}
	}
	if _, err := putRecord(ctx, raw, kindBootstrap, migratedID, 0, &migrateRecord{Tenant: tenant, At: now}); err != nil && !IsConflict(err) {
		return fmt.Errorf("write the migration marker: %w", err)
	}
	return nil
}

// migrateTenant returns the default tenant's id, making it (and agreeing
// on it with racing gateways) on first use.
func migrateTenant(ctx context.Context, raw Store, now time.Time) (string, error) {
	for range casTries {
		var m migrateRecord
		_, err := getRecord(ctx, raw, kindBootstrap, migrateTenantID, &m)
		if err == nil {
			t := tenantRecord{ID: m.Tenant, Name: defaultTenantName, CreatedAt: m.At}
			if _, err := putRecord(ctx, raw, kindTenant, t.ID, 0, &t); err != nil && !IsConflict(err) {
				return "", fmt.Errorf("create the default account: %w", err)
			}
			return m.Tenant, nil
		}
		if !IsNotFound(err) {
			return "", fmt.Errorf("read the default account's record: %w", err)
		}
		m = migrateRecord{Tenant: newID(prefixTenant), At: now}
		if _, err := putRecord(ctx, raw, kindBootstrap, migrateTenantID, 0, &m); err != nil && !IsConflict(err) {
			return "", fmt.Errorf("name the default account: %w", err)
		}
	}
	return "", fmt.Errorf("the default account's record kept changing; retry")
}

// migrateOne moves r into tenant: the new record first, then the old one
// goes.
func migrateOne(ctx context.Context, raw Store, tenant string, r api.Record, now time.Time) error {
	value := r.Value
	switch r.Kind {
	case kindAccount:
		var a accountRecord
		if err := json.Unmarshal(r.Value, &a); err != nil {
			return err
		}
		if err := migratePerson(ctx, raw, tenant, a); err != nil {
			return err
		}
		a.PasswordHash = ""
		b, err := json.Marshal(&a)
		if err != nil {
			return err
		}
		value = b
	case kindKey:
		if _, err := putRecord(ctx, raw, kindKeyTenant, r.ID, 0, &keyTenantRecord{Tenant: tenant}); err != nil && !IsConflict(err) {
			return err
		}
	}
	if _, err := raw.PutRecord(ctx, r.Kind, tenant+"."+r.ID, 0, value); err != nil && !IsConflict(err) {
		return err
	}
	if err := raw.DeleteRecord(ctx, r.Kind, r.ID, r.Version); err != nil && !IsNotFound(err) && !IsConflict(err) {
		return err
	}
	return nil
}

// migratePerson makes the person of an old member record (with its
// password hash), member of tenant.
func migratePerson(ctx context.Context, raw Store, tenant string, a accountRecord) error {
	for range casTries {
		var p personRecord
		version, err := getRecord(ctx, raw, kindPerson, a.ID, &p)
		switch {
		case IsNotFound(err):
			p = personRecord{ID: a.ID, Email: a.Email, PasswordHash: a.PasswordHash, CreatedAt: a.CreatedAt}
		case err != nil:
			return err
		}
		if slices.Contains(p.Tenants, tenant) && p.PasswordHash != "" {
			return nil
		}
		if p.PasswordHash == "" {
			p.PasswordHash = a.PasswordHash
		}
		if !slices.Contains(p.Tenants, tenant) {
			p.Tenants = append(p.Tenants, tenant)
		}
		if _, err := putRecord(ctx, raw, kindPerson, a.ID, version, &p); err == nil || !IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("person %s kept changing; retry", a.ID)
}

// migrateSignins gives the sign-ins from before tenants the default
// tenant.
func migrateSignins(ctx context.Context, raw Store, tenant string) error {
	return eachRecord(ctx, raw, kindSignin, "", func(r versioned[signinRecord]) (bool, error) {
		if r.Value.Tenant != "" {
			return true, nil
		}
		r.Value.Tenant = tenant
		if _, err := putRecord(ctx, raw, kindSignin, r.ID, r.Version, &r.Value); err != nil && !IsConflict(err) && !IsNotFound(err) {
			return false, fmt.Errorf("move sign-in to account %s: %w", tenant, err)
		}
		return true, nil
	})
}

// migratedTenant is the tenant the records from before tenants moved to,
// for a grant issued before (which names none): 401 when there is none.
func migratedTenant(ctx context.Context, store Store) (string, error) {
	var m migrateRecord
	_, err := getRecord(ctx, store, kindBootstrap, migrateTenantID, &m)
	switch {
	case IsNotFound(err) || err == nil && m.Tenant == "":
		return "", unauthorized("the grant names no account: start the run again")
	case err != nil:
		return "", err
	}
	return m.Tenant, nil
}
