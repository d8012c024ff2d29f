package gateway

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// BootstrapResult says what Bootstrap did.
type BootstrapResult struct {
	// Created is true when this call created the owner; Password is then
	// its one-time password, to print once.
	Created   bool
	AccountID string
	Email     string
	Password  string
	// Tenant is the account (tenant) the owner owns.
	Tenant api.Tenant
}

// bootstrapID is the id of the record that elects the bootstrapping
// gateway.
const bootstrapID = "owner"

// Bootstrap is BootstrapNamed with the account named "default".
func Bootstrap(ctx context.Context, store Store, email string, now time.Time) (BootstrapResult, error) {
	return BootstrapNamed(ctx, store, email, defaultTenantName, now)
}

// BootstrapNamed creates the first account (tenant), named name, and its
// owner, with email and a random password, unless some account has an
// owner. Gateways racing to do it are safe: they compare-and-set one
// bootstrap record, and only the winner creates the owner (and gets the
// password). A winner that died halfway is taken over after a minute, in
// the account it began.
func BootstrapNamed(ctx context.Context, raw Store, email, name string, now time.Time) (BootstrapResult, error) {
	if err := checkEmail(email); err != nil {
		return BootstrapResult{}, err
	}
	if err := checkName("name", name); err != nil {
		return BootstrapResult{}, fmt.Errorf("account name %q: want 1 to 100 characters without control characters", name)
	}
	store := newTenantStore(raw)
	email = normalizeEmail(email)
	res := BootstrapResult{AccountID: accountID(email), Email: email}
	owned := false
	if err := eachRecord(ctx, store, kindTenant, "", func(t versioned[tenantRecord]) (bool, error) {
		err := eachRecord(withTenant(ctx, t.ID), store, kindAccount, "", func(a versioned[accountRecord]) (bool, error) {
			owned = a.Value.Role == api.RoleOwner
			return !owned, nil
		})
		return !owned, err
	}); err != nil {
		return res, fmt.Errorf("list accounts: %w", err)
	}
	if owned {
		return res, nil
	}
	var b bootstrapRecord
	version, err := getRecord(ctx, store, kindBootstrap, bootstrapID, &b)
	switch {
	case IsNotFound(err):
		version = 0
	case err != nil:
		return res, fmt.Errorf("read bootstrap record: %w", err)
	case now.Sub(b.StartedAt) < time.Minute:
		return res, nil // another gateway is at it
	}
	tenant := b.Tenant
	if tenant == "" {
		tenant = newID(prefixTenant)
	}
	if _, err := putRecord(ctx, store, kindBootstrap, bootstrapID, version, &bootstrapRecord{Account: res.AccountID, Tenant: tenant, StartedAt: now}); err != nil {
		if IsConflict(err) {
			return res, nil // another gateway won
		}
		return res, fmt.Errorf("write bootstrap record: %w", err)
	}
	t := tenantRecord{ID: tenant, Name: name, CreatedAt: now}
	if _, err := getRecord(ctx, store, kindTenant, tenant, &t); IsNotFound(err) {
		if _, err := putRecord(ctx, store, kindTenant, tenant, 0, &t); err != nil {
			return res, fmt.Errorf("create account %s: %w", name, err)
		}
	} else if err != nil {
		return res, fmt.Errorf("read account %s: %w", tenant, err)
	}
	res.Tenant = t.public(api.RoleOwner, false)
	ctx = withTenant(ctx, tenant)
	password := newPassword()
	// The person, with a new password (the operator asked for this email
	// to own the site), member of the tenant.
	var p personRecord
	pv, err := getRecord(ctx, store, kindPerson, res.AccountID, &p)
	switch {
	case IsNotFound(err):
		p = personRecord{ID: res.AccountID, Email: email, CreatedAt: now}
	case err != nil:
		return res, fmt.Errorf("read person: %w", err)
	}
	p.PasswordHash = hashPassword(password)
	if !slices.Contains(p.Tenants, tenant) {
		p.Tenants = append(p.Tenants, tenant)
	}
	if _, err := putRecord(ctx, store, kindPerson, p.ID, pv, &p); err != nil {
		if IsConflict(err) {
			return res, fmt.Errorf("person %s changed while it was being made the owner; run bootstrap again", email)
		}
		return res, fmt.Errorf("create owner: %w", err)
	}
	a := accountRecord{ID: res.AccountID, Email: email, Role: api.RoleOwner, CreatedAt: now, Generation: newGeneration()}
	var cur accountRecord
	curVersion, err := getRecord(ctx, store, kindAccount, a.ID, &cur)
	switch {
	case IsNotFound(err):
		curVersion = 0
	case err != nil:
		return res, fmt.Errorf("read account: %w", err)
	default:
		a.CreatedAt = cur.CreatedAt
	}
	if _, err := putRecord(ctx, store, kindAccount, a.ID, curVersion, &a); err != nil {
		if IsConflict(err) {
			return res, fmt.Errorf("account %s changed while it was being made the owner; run bootstrap again", email)
		}
		return res, fmt.Errorf("create owner: %w", err)
	}
	res.Created, res.Password = true, password
	return res, nil
}
