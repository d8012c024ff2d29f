package gateway

import (
	"context"
	"fmt"
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
}

// bootstrapID is the id of the record that elects the bootstrapping
// gateway.
const bootstrapID = "owner"

// Bootstrap creates the first owner, with email and a random password,
// unless an owner exists. Gateways racing to do it are safe: they
// compare-and-set one bootstrap record, and only the winner creates the
// owner (and gets the password). A winner that died halfway is taken over
// after a minute.
func Bootstrap(ctx context.Context, store Store, email string, now time.Time) (BootstrapResult, error) {
	if err := checkEmail(email); err != nil {
		return BootstrapResult{}, err
	}
	email = normalizeEmail(email)
	res := BootstrapResult{AccountID: accountID(email), Email: email}
	owned := false
	if err := eachRecord(ctx, store, kindAccount, "", func(a versioned[accountRecord]) (bool, error) {
		owned = a.Value.Role == api.RoleOwner
		return !owned, nil
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
	if _, err := putRecord(ctx, store, kindBootstrap, bootstrapID, version, &bootstrapRecord{Account: res.AccountID, StartedAt: now}); err != nil {
		if IsConflict(err) {
			return res, nil // another gateway won
		}
		return res, fmt.Errorf("write bootstrap record: %w", err)
	}
	password := newPassword()
	a := accountRecord{ID: res.AccountID, Email: email, Role: api.RoleOwner, PasswordHash: hashPassword(password), CreatedAt: now,
		Generation: newGeneration()}
	var cur accountRecord
	curVersion, err := getRecord(ctx, store, kindAccount, a.ID, &cur)
	switch {
	case IsNotFound(err):
		curVersion = 0
	case err != nil:
		return res, fmt.Errorf("read account: %w", err)
	default:
		// A member with this email exists: make it the owner, with a new
		// password (the operator asked for this email to own the site).
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
