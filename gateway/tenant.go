package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// Tenants (docs/design/tenants.md): every record of a scoped kind belongs
// to one tenant and is stored under the id TENANT.ID. tenantStore is the
// one place that enforces it: the gateway's handlers read and write
// through it with the tenant of the call's context (withTenant, set by
// serveRoute from the principal), so no handler can name another
// tenant's record.

// Record kinds of tenants and people (global).
const (
	kindTenant    = "tenant"     // id acct-...: tenantRecord
	kindPerson    = "person"     // id accountID(email): personRecord
	kindKeyTenant = "key_tenant" // id the key's: keyTenantRecord
)

// scopedKinds are the kinds stored per tenant; globalKinds those that are
// not. A kind in neither is refused, so that a new kind is classified
// before it is used.
var (
	scopedKinds = map[string]bool{
		kindAccount: true, kindKey: true, kindWorkspace: true, kindSession: true, kindRun: true,
		kindRunLive: true, kindRunWS: true, kindRunExpiry: true, kindQuota: true, kindProposal: true,
		kindRunEvent: true, kindLibrary: true, "secret": true, "data_key": true,
	}
	globalKinds = map[string]bool{
		kindTenant: true, kindPerson: true, kindSignin: true, kindKeyTenant: true, kindBootstrap: true,
		kindGrantKey: true, "secret_ticket": true,
	}
)

// errNoTenant is a scoped access from a context acting in no tenant: a
// bug of the caller, never a global read.
var errNoTenant = errors.New("record store: a scoped kind accessed without a tenant in the context")

// tenantStore is a Store whose scoped kinds are those of the context's
// tenant: ids are stored as TENANT.ID and answered without the prefix,
// lists see only the tenant's records, and their cursors are translated
// both ways. Global kinds and the audit log pass through. Safe for
// concurrent use.
type tenantStore struct {
	Store
}

// newTenantStore wraps raw.
func newTenantStore(raw Store) *tenantStore { return &tenantStore{Store: raw} }

// prefix returns the id prefix of kind in ctx ("" for a global kind).
func (s *tenantStore) prefix(ctx context.Context, kind string) (string, error) {
	switch {
	case globalKinds[kind]:
		return "", nil
	case !scopedKinds[kind]:
		return "", fmt.Errorf("record kind %q is neither scoped nor global (gateway/tenant.go)", kind)
	}
	t := tenantFrom(ctx)
	if t == "" {
		return "", fmt.Errorf("%s record: %w", kind, errNoTenant)
	}
	return t + ".", nil
}

func (s *tenantStore) GetRecord(ctx context.Context, kind, id string) (api.Record, error) {
	p, err := s.prefix(ctx, kind)
	if err != nil {
		return api.Record{}, err
	}
	rec, err := s.Store.GetRecord(ctx, kind, p+id)
	rec.ID = strings.TrimPrefix(rec.ID, p)
	return rec, err
}

func (s *tenantStore) ListRecordsPage(ctx context.Context, kind, prefix string, limit int, cursor string) ([]api.Record, string, error) {
	p, err := s.prefix(ctx, kind)
	switch {
	case err != nil:
		return nil, "", err
	case p == "":
		return s.Store.ListRecordsPage(ctx, kind, prefix, limit, cursor)
	}
	if cursor != "" {
		key, ok := cursorKey(cursor)
		if !ok {
			return nil, "", fmt.Errorf("list %s records: cursor %q is not one of this list", kind, cursor)
		}
		cursor = recordCursor(p + key)
	}
	recs, next, err := s.Store.ListRecordsPage(ctx, kind, p+prefix, limit, cursor)
	if err != nil {
		return nil, "", err
	}
	for i := range recs {
		recs[i].ID = strings.TrimPrefix(recs[i].ID, p)
	}
	if next != "" {
		key, ok := cursorKey(next)
		rest, inside := strings.CutPrefix(key, p)
		if !ok || !inside {
			// Past the tenant's records: the list ends here.
			return recs, "", nil
		}
		next = recordCursor(rest)
	}
	return recs, next, nil
}

func (s *tenantStore) PutRecord(ctx context.Context, kind, id string, version uint64, value json.RawMessage) (api.Record, error) {
	p, err := s.prefix(ctx, kind)
	if err != nil {
		return api.Record{}, err
	}
	rec, err := s.Store.PutRecord(ctx, kind, p+id, version, value)
	rec.ID = strings.TrimPrefix(rec.ID, p)
	return rec, err
}

func (s *tenantStore) DeleteRecord(ctx context.Context, kind, id string, version uint64) error {
	p, err := s.prefix(ctx, kind)
	if err != nil {
		return err
	}
	return s.Store.DeleteRecord(ctx, kind, p+id, version)
}

// The scheduler's record list cursors are "r:" + the key the next page
// starts at, in unpadded base64url (scheduler/http_page.go); the tenant
// store moves the key in and out of the tenant's prefix.

func cursorKey(cursor string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < 2 || b[0] != 'r' || b[1] != ':' {
		return "", false
	}
	return string(b[2:]), true
}

func recordCursor(key string) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte("r:"), key...))
}

// splitTenant splits the raw id TENANT.ID of a scoped record; ok is false
// for an id without a tenant (a record from before tenants).
func splitTenant(raw string) (tenant, id string, ok bool) {
	tenant, id, ok = strings.Cut(raw, ".")
	if !ok || !validID(tenant, prefixTenant) || id == "" {
		return "", raw, false
	}
	return tenant, id, true
}
