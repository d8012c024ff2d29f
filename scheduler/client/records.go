package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// The record store and the audit log keep the gateway's state. Records are
// changed by compare-and-set on their version: IsConflict(err) says a put
// or delete named another version than the record's (or created a record
// that exists), IsNotFound(err) that there is no such record.
//
// Puts and deletes are retried like reads: compare-and-set keeps a repeat
// from applying twice, but a repeat of a try that did apply fails, a put
// with a conflict and a delete with not found. After such an error
// following a failover, read the record back before deciding who won.

// recordPath returns the escaped path of record kind/id. It refuses what
// no URL path can carry; the server checks the rest.
func recordPath(kind, id string) (string, error) {
	for _, s := range []string{kind, id} {
		if s == "" || s == "." || s == ".." {
			return "", fmt.Errorf("record %q/%q: kind and id must not be empty, \".\" or \"..\"", kind, id)
		}
	}
	return "/v1/records/" + escape(kind) + "/" + escape(id), nil
}

// GetRecord returns the record kind/id.
func (c *Client) GetRecord(ctx context.Context, kind, id string) (api.Record, error) {
	var out api.Record
	p, err := recordPath(kind, id)
	if err != nil {
		return out, err
	}
	_, err = c.call(ctx, request{method: http.MethodGet, path: p}, nil, &out)
	return out, err
}

// ListRecords returns every record of kind whose id starts with prefix
// (all when empty), ordered by id, reading page after page (see
// ListRecordsPage to read one).
func (c *Client) ListRecords(ctx context.Context, kind, prefix string) ([]api.Record, error) {
	if err := checkKind(kind); err != nil {
		return nil, err
	}
	return listAll[api.Record](ctx, c, "/v1/records/"+escape(kind), prefixQuery(prefix))
}

// ListRecordsPage returns one page of the records of kind whose id starts
// with prefix, ordered by id: at most limit (0: the server's default, 100;
// at most MaxPageLimit) from cursor ("" for the first page), and the
// cursor of the next page ("" on the last). A page costs the scheduler the
// same whatever the number of records.
func (c *Client) ListRecordsPage(ctx context.Context, kind, prefix string, limit int, cursor string) (recs []api.Record, next string, err error) {
	if err := checkKind(kind); err != nil {
		return nil, "", err
	}
	return listPage[api.Record](ctx, c, "/v1/records/"+escape(kind), prefixQuery(prefix), limit, cursor)
}

func checkKind(kind string) error {
	if kind == "" || kind == "." || kind == ".." {
		return fmt.Errorf("record kind %q: must not be empty, \".\" or \"..\"", kind)
	}
	return nil
}

func prefixQuery(prefix string) url.Values {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return q
}

// PutRecord stores value as the record kind/id if its current version is
// version (0: if it does not exist yet), and returns the stored record,
// whose version is version+1. value is a JSON document of at most 256 KiB;
// it is stored compacted (equal as JSON, not byte for byte).
func (c *Client) PutRecord(ctx context.Context, kind, id string, version uint64, value json.RawMessage) (api.Record, error) {
	var out api.Record
	p, err := recordPath(kind, id)
	if err != nil {
		return out, err
	}
	_, err = c.call(ctx, request{method: http.MethodPut, path: p}, api.PutRecordRequest{Version: version, Value: value}, &out)
	return out, err
}

// DeleteRecord deletes the record kind/id if its current version is
// version.
func (c *Client) DeleteRecord(ctx context.Context, kind, id string, version uint64) error {
	p, err := recordPath(kind, id)
	if err != nil {
		return err
	}
	q := url.Values{}
	q.Set("version", strconv.FormatUint(version, 10))
	_, err = c.call(ctx, request{method: http.MethodDelete, path: p, query: q}, nil, nil)
	return err
}

// AppendAudit appends entry, a JSON object of at most 64 KiB, to the audit
// log and returns it numbered and timed by the scheduler. It is retried
// only when it surely did not reach the scheduler: a repeat would append
// the entry twice.
//
// The entry has no tenant, who or action: AppendAuditEntry gives them.
func (c *Client) AppendAudit(ctx context.Context, entry json.RawMessage) (api.AuditEntry, error) {
	return c.AppendAuditEntry(ctx, api.AppendAuditRequest{Entry: entry})
}

// AppendAuditEntry is AppendAudit with the entry's typed fields: its
// tenant, who and action, which listings filter by (AuditPage).
func (c *Client) AppendAuditEntry(ctx context.Context, req api.AppendAuditRequest) (api.AuditEntry, error) {
	var out api.AuditEntry
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/audit", retry: retryUnsent}, req, &out)
	return out, err
}

// Audit returns the audit entries of every tenant after sequence number
// after, oldest first: at most limit of them (0: the server's default,
// 100; the server caps it at 1000). Pass the last entry's Seq as after to
// read on. AuditPage filters.
func (c *Client) Audit(ctx context.Context, after uint64, limit int) ([]api.AuditEntry, error) {
	q := url.Values{}
	q.Set("after", strconv.FormatUint(after, 10))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out []api.AuditEntry
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/audit", query: q}, nil, &out)
	return out, err
}

// AuditPage returns one page of the audit entries that match f, oldest
// first: at most limit (0: the server's default, 100; at most
// MaxPageLimit) from cursor ("" for the first page), and the cursor of the
// next page ("" on the last). A page costs the scheduler a bounded number
// of entries examined, so with a filter it may hold fewer than limit
// entries, even none, and still have a next cursor.
func (c *Client) AuditPage(ctx context.Context, f api.AuditFilter, limit int, cursor string) (entries []api.AuditEntry, next string, err error) {
	q := url.Values{}
	if !f.AllTenants {
		q.Set("tenant", f.Tenant)
	}
	for k, v := range map[string]string{"who": f.Who, "action": f.Action} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for k, t := range map[string]time.Time{"since": f.Since, "until": f.Until} {
		if !t.IsZero() {
			q.Set(k, t.Format(time.RFC3339Nano))
		}
	}
	if f.After > 0 {
		q.Set("after", strconv.FormatUint(f.After, 10))
	}
	return listPage[api.AuditEntry](ctx, c, "/v1/audit", q, limit, cursor)
}

// DropTenantAudit drops the audit entries of tenant numbered below before
// and leaves every other tenant's; the entry recording the drop is the
// tenant's, with who as its typed who and by in its document. It returns
// how many were dropped, and is retried like DropAudit.
func (c *Client) DropTenantAudit(ctx context.Context, tenant string, before uint64, who string, by json.RawMessage) (dropped uint64, err error) {
	var out api.DropAuditAnswer
	_, err = c.call(ctx, request{method: http.MethodPost, path: "/v1/audit/drop", retry: retryUnsent},
		api.DropAuditRequest{Before: before, By: by, Tenant: &tenant, Who: who}, &out)
	return out.Dropped, err
}

// DropAudit drops the audit entries numbered below before (export them
// first, with Audit) and returns how many were dropped. The scheduler
// appends an entry recording the drop, with by (who asked, a JSON value
// of at most 4 KiB, or nil) in it: like AppendAudit, it is retried only
// when it surely did not reach the scheduler. It drops every tenant's
// entries: the operator's retention (DropTenantAudit drops one tenant's).
func (c *Client) DropAudit(ctx context.Context, before uint64, by json.RawMessage) (dropped uint64, err error) {
	var out api.DropAuditAnswer
	_, err = c.call(ctx, request{method: http.MethodPost, path: "/v1/audit/drop", retry: retryUnsent},
		api.DropAuditRequest{Before: before, By: by}, &out)
	return out.Dropped, err
}
