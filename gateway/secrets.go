package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/agentfile"
	"github.com/rodon-compute/rodon/internal/secretbox"
)

// The secrets of a tenant (docs/design/tenants.md, "Secrets"): records of
// kind secret (id the name) hold each value sealed by the tenant's data
// key (kind data_key, id dataKeyID), which is wrapped by the root key
// file (rootkey.go). No route answers a value or a ciphertext; only
// secretValues opens them, for the delivery to a step's node.

// maxSecretValue bounds a secret's value.
const maxSecretValue = 64 << 10

// maxSecrets bounds an account's secrets (a var for the tests). A new
// secret past it is refused; two created at once may each pass the count,
// so the bound may be passed by the gateways creating at that moment.
var maxSecrets = 500

// dataKeyID is the id of a tenant's data key record (the tenant store
// makes it TENANT.data).
const dataKeyID = "data"

// secretRecord is a secret (kind "secret", id its name).
type secretRecord struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Sealed is the value sealed by the tenant's data key, bound to the
	// tenant, Name and Version.
	Sealed    []byte    `json:"sealed"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy api.Actor `json:"created_by"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy api.Actor `json:"updated_by"`
}

func (r secretRecord) public() api.Secret {
	return api.Secret{Name: r.Name, Version: r.Version, UpdatedBy: r.UpdatedBy, UpdatedAt: r.UpdatedAt, CreatedAt: r.CreatedAt}
}

// dataKeyRecord is a tenant's data key (kind "data_key", id dataKeyID),
// wrapped by the root key with the tenant as associated data. Tenant is
// kept too, so that a scan of the raw store (RotateRoot) knows the
// associated data of every record.
type dataKeyRecord struct {
	Tenant  string `json:"tenant"`
	Wrapped []byte `json:"wrapped"`
	// Root is the id of the root key that wrapped it (not secret).
	Root      uint32    `json:"root"`
	CreatedAt time.Time `json:"created_at"`
}

// errNoDataKey is dataKey's answer, when not asked to create one, for a
// tenant that never had a secret.
var errNoDataKey = errors.New("the tenant has no data key")

// dataKey opens the data key of ctx's tenant, creating it first if create
// and it does not exist. Two gateways creating it at once: the loser of
// the compare-and-set reads the winner's.
func (g *Gateway) dataKey(ctx context.Context, create bool) (*secretbox.DataKey, error) {
	tenant := tenantFrom(ctx)
	if tenant == "" {
		return nil, errors.New("secrets: the call acts in no tenant")
	}
	root, err := g.rootKey.get()
	if err != nil {
		return nil, err
	}
	for range 3 {
		var rec dataKeyRecord
		_, err := getRecord(ctx, g.store, kindDataKey, dataKeyID, &rec)
		switch {
		case err == nil:
			if rec.Tenant != tenant {
				return nil, fmt.Errorf("data key record of tenant %s names tenant %q", tenant, rec.Tenant)
			}
			k, err := secretbox.OpenDataKey(root, tenant, rec.Wrapped)
			if err != nil {
				g.log.Error("root key does not open a data key", "tenant", tenant, "root_key", rec.Root, "error", err)
				return nil, secretsUnavailable(fmt.Sprintf("root key file %s does not open this account's data key: "+
					"it is not the cluster's root key, or lacks the key of a rotation under way", g.rootKey.path))
			}
			return k, nil
		case !IsNotFound(err):
			return nil, err
		case !create:
			return nil, errNoDataKey
		}
		wrapped, err := secretbox.NewDataKey(root, tenant)
		if err != nil {
			return nil, err
		}
		rec = dataKeyRecord{Tenant: tenant, Wrapped: wrapped, Root: root.PrimaryID(), CreatedAt: g.now()}
		if _, err := putRecord(ctx, g.store, kindDataKey, dataKeyID, 0, &rec); IsConflict(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		return secretbox.OpenDataKey(root, tenant, wrapped)
	}
	return nil, conflict("the account's data key changed meanwhile: retry")
}

// checkSecretName checks the {name} of a secrets route.
func checkSecretName(name string) error {
	if !agentfile.ValidSecretName(name) {
		return badRequest("secret name %q: want an environment variable name: upper-case letters, digits and '_', not starting with a digit, at most %d",
			truncateText(name, 80), agentfile.MaxSecretName)
	}
	return nil
}

// checkSecretValue checks a value to set; the message never quotes it.
func checkSecretValue(v string) error {
	switch {
	case v == "":
		return badRequest("field %q: want a value, not empty", "value")
	case len(v) > maxSecretValue:
		return badRequest("field %q: %d bytes, want at most %d", "value", len(v), maxSecretValue)
	case strings.ContainsRune(v, 0):
		return badRequest("field %q: want no NUL byte (it cannot be in an environment variable)", "value")
	case !utf8.ValidString(v):
		return badRequest("field %q: want UTF-8 text", "value")
	}
	return nil
}

func (g *Gateway) handlePutSecret(c *call) error {
	name := c.r.PathValue("name")
	if err := checkSecretName(name); err != nil {
		return err
	}
	c.target = name
	var req api.PutSecretRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := checkSecretValue(req.Value); err != nil {
		return err
	}
	k, err := g.dataKey(c.ctx, true)
	if err != nil {
		return err
	}
	tenant := tenantFrom(c.ctx)
	for range 3 {
		var old secretRecord
		version, err := getRecord(c.ctx, g.store, kindSecret, name, &old)
		if err != nil && !IsNotFound(err) {
			return err
		}
		now := g.now()
		rec := secretRecord{Name: name, Version: old.Version + 1, CreatedAt: old.CreatedAt, CreatedBy: old.CreatedBy,
			UpdatedAt: now, UpdatedBy: c.p.actor}
		if version == 0 {
			rec.CreatedAt, rec.CreatedBy = now, c.p.actor
			recs, _, err := g.store.ListRecordsPage(c.ctx, kindSecret, "", maxSecrets, "")
			if err != nil {
				return err
			}
			if len(recs) >= maxSecrets {
				return quotaExceeded("the account has %d secrets, at most %d: delete one before setting %s", len(recs), maxSecrets, name)
			}
		}
		if rec.Sealed, err = k.Seal(tenant, name, rec.Version, req.Value); err != nil {
			return err
		}
		if _, err := putRecord(c.ctx, g.store, kindSecret, name, version, &rec); IsConflict(err) {
			continue
		} else if err != nil {
			return err
		}
		c.auditSecret, c.auditVersion = name, rec.Version
		status := http.StatusOK
		if version == 0 {
			status = http.StatusCreated
		}
		return c.json(status, rec.public())
	}
	return conflict("secret %s changed meanwhile: retry", name)
}

func (g *Gateway) handleSecrets(c *call) error {
	pg, err := parsePage(c.r.URL.Query(), "secrets")
	if err != nil {
		return err
	}
	if _, err := g.rootKey.get(); err != nil {
		return err
	}
	recs, next, err := scanPage[secretRecord](c.ctx, g.store, kindSecret, "", pg, nil)
	if err != nil {
		return err
	}
	out := make([]api.Secret, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Value.public())
	}
	return c.page("secrets", out, next)
}

func (g *Gateway) handleDeleteSecret(c *call) error {
	name := c.r.PathValue("name")
	if err := checkSecretName(name); err != nil {
		return err
	}
	c.target = name
	if _, err := g.rootKey.get(); err != nil {
		return err
	}
	var rec secretRecord
	version, err := getRecord(c.ctx, g.store, kindSecret, name, &rec)
	if IsNotFound(err) {
		return notFound("no secret %s", name)
	}
	if err != nil {
		return err
	}
	c.auditSecret, c.auditVersion = name, rec.Version
	if err := g.store.DeleteRecord(c.ctx, kindSecret, name, version); IsConflict(err) {
		return conflict("secret %s changed meanwhile: retry", name)
	} else if err != nil && !IsNotFound(err) {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}
