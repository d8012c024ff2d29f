package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Store is the scheduler's replicated record store and audit log, as the
// gateway uses it. *client.Client implements it. Records change only by
// compare-and-set: PutRecord with version 0 creates (conflict if the
// record exists), with version v replaces version v (conflict otherwise).
//
// Errors: a missing record is an error for which IsNotFound is true, a lost
// compare-and-set one for which IsConflict is true (a *client.Error with
// code not_found or conflict, as the scheduler answers).
//
// Nothing is ever listed whole: lists are read a page at a time
// (ListRecordsPage: at most limit records of kind whose id starts with
// prefix, in id order, after cursor; next is the cursor of the page after,
// "" on the last page), so that every read costs at most a page.
type Store interface {
	GetRecord(ctx context.Context, kind, id string) (api.Record, error)
	ListRecordsPage(ctx context.Context, kind, prefix string, limit int, cursor string) (recs []api.Record, next string, err error)
	PutRecord(ctx context.Context, kind, id string, version uint64, value json.RawMessage) (api.Record, error)
	DeleteRecord(ctx context.Context, kind, id string, version uint64) error
	// AppendAuditEntry appends an audit entry of req.Tenant.
	AppendAuditEntry(ctx context.Context, req api.AppendAuditRequest) (api.AuditEntry, error)
	// AuditPage reads a page of the audit entries that match f: the
	// gateway always names the tenant (f.AllTenants is the operator's).
	// A page may hold fewer than limit entries and still have a next.
	AuditPage(ctx context.Context, f api.AuditFilter, limit int, cursor string) (entries []api.AuditEntry, next string, err error)
	// DropTenantAudit drops tenant's audit entries before sequence number
	// before, leaving every other tenant's, and appends an entry of the
	// tenant saying so, naming who and by (who asked); it returns how
	// many were dropped.
	DropTenantAudit(ctx context.Context, tenant string, before uint64, who string, by json.RawMessage) (dropped uint64, err error)
}

// Steps is the scheduler's step API, as the gateway uses it. *client.Client
// implements it.
type Steps interface {
	SubmitStep(ctx context.Context, req api.StepRequest) (api.Step, error)
	Step(ctx context.Context, id string) (api.Step, error)
	CancelStep(ctx context.Context, id, reason string) (api.Step, error)
	WaitStep(ctx context.Context, id string, index uint64, wait time.Duration) (api.Step, error)
	StreamURL(ctx context.Context, id string) (string, error)
	// SealEnv has the scheduler seal env (NAME=VALUE) for the step that
	// will be submitted later with id step: run records keep the sealed
	// entries, never a value.
	SealEnv(ctx context.Context, step string, env []string) ([]api.SealedEnv, error)
}

// IsNotFound reports whether err is the scheduler's not_found answer.
func IsNotFound(err error) bool { return client.IsCode(err, api.CodeNotFound) }

// IsConflict reports whether err is the scheduler's conflict answer: a
// record that exists already, a stale version, a step already submitted
// or already ended.
func IsConflict(err error) bool { return client.IsCode(err, api.CodeConflict) }

// Record kinds of the gateway's state. Values are the JSON documents of
// the types in records.go.
const (
	kindAccount   = "account"
	kindKey       = "key"
	kindSignin    = "signin"
	kindWorkspace = "workspace"
	kindSession   = "session"
	kindRun       = "run"
	kindRunLive   = "run_live"
	kindRunWS     = "run_ws"
	kindRunExpiry = "run_expiry"
	kindQuota     = "quota"
	kindBootstrap = "bootstrap"
	// Agent runs (agents.go, grant.go; docs/design/agents.md).
	kindGrantKey = "grant_key" // id the key's kid: a gateway's public grant key
	kindProposal = "proposal"  // id prop-...: api.Proposal
	kindRunEvent = "run_event" // id RUN.SEQ (SEQ %08d): api.RunEvent
	// Secrets (secrets.go; docs/design/tenants.md, "Secrets").
	kindSecret  = "secret"   // id the secret's name: secretRecord
	kindDataKey = "data_key" // id "data": the tenant's wrapped data key
)

// getRecord reads the record kind/id into v and returns its version.
func getRecord(ctx context.Context, s Store, kind, id string, v any) (uint64, error) {
	rec, err := s.GetRecord(ctx, kind, id)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(rec.Value, v); err != nil {
		return 0, fmt.Errorf("decode %s record %s: %w", kind, id, err)
	}
	return rec.Version, nil
}

// putRecord writes v as the record kind/id replacing version (0 creates)
// and returns the new version.
func putRecord(ctx context.Context, s Store, kind, id string, version uint64, v any) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s record %s: %w", kind, id, err)
	}
	rec, err := s.PutRecord(ctx, kind, id, version, b)
	if err != nil {
		return 0, err
	}
	return rec.Version, nil
}

// versioned is a decoded record with its version.
type versioned[T any] struct {
	ID      string
	Version uint64
	Value   T
}

// decodeRecords decodes recs as documents of type T.
func decodeRecords[T any](kind string, recs []api.Record) ([]versioned[T], error) {
	out := make([]versioned[T], 0, len(recs))
	for _, rec := range recs {
		var v T
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			return nil, fmt.Errorf("decode %s record %s: %w", kind, rec.ID, err)
		}
		out = append(out, versioned[T]{ID: rec.ID, Version: rec.Version, Value: v})
	}
	return out, nil
}

// storePage is the page size of the gateway's own scans (the driver, the
// maintenance loop): the scheduler's largest.
const storePage = 1000

// eachRecord calls f with every record of kind whose id starts with
// prefix, a page at a time, until f returns false or an error. It is for
// lists bounded by a quota or by the organisation's size (live runs,
// quota counters, owners); API lists page with scanPage instead.
func eachRecord[T any](ctx context.Context, s Store, kind, prefix string, f func(versioned[T]) (bool, error)) error {
	cursor := ""
	for {
		recs, next, err := s.ListRecordsPage(ctx, kind, prefix, storePage, cursor)
		if err != nil {
			return err
		}
		vs, err := decodeRecords[T](kind, recs)
		if err != nil {
			return err
		}
		for _, v := range vs {
			more, err := f(v)
			if err != nil || !more {
				return err
			}
		}
		if next == "" || next == cursor {
			return nil
		}
		cursor = next
	}
}
