package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// schedStore is the scheduler client as the gateway's Store.
//
// The client's ListRecordsPage and DropAudit come with the scheduler's
// side of issue 15; a client that has them is used as it is (they are
// found at run time, so this file compiles either way and can go once
// they are merged). Without them, pages are cut from the whole list, and
// dropping audit entries is refused.
type schedStore struct {
	*client.Client
}

type recordPager interface {
	ListRecordsPage(ctx context.Context, kind, prefix string, limit int, cursor string) ([]api.Record, string, error)
}

type auditDropper interface {
	DropAudit(ctx context.Context, before uint64, by json.RawMessage) (uint64, error)
}

// ListRecordsPage returns at most limit records of kind whose id starts
// with prefix, after cursor.
func (s schedStore) ListRecordsPage(ctx context.Context, kind, prefix string, limit int, cursor string) ([]api.Record, string, error) {
	if p, ok := any(s.Client).(recordPager); ok {
		return p.ListRecordsPage(ctx, kind, prefix, limit, cursor)
	}
	recs, err := s.Client.ListRecords(ctx, kind, prefix)
	if err != nil {
		return nil, "", err
	}
	return pageOf(recs, limit, cursor)
}

// pageOf cuts the page after cursor (the last id of the page before) from
// recs, ordered by id.
func pageOf(recs []api.Record, limit int, cursor string) ([]api.Record, string, error) {
	if limit <= 0 {
		limit = 100
	}
	i, _ := slices.BinarySearchFunc(recs, cursor, func(r api.Record, id string) int { return strings.Compare(r.ID, id) })
	if i < len(recs) && recs[i].ID == cursor {
		i++
	}
	recs = recs[i:]
	if len(recs) <= limit {
		return recs, "", nil
	}
	return recs[:limit], recs[limit-1].ID, nil
}

// DropAudit drops the audit entries before seq before.
func (s schedStore) DropAudit(ctx context.Context, before uint64, by json.RawMessage) (uint64, error) {
	if d, ok := any(s.Client).(auditDropper); ok {
		return d.DropAudit(ctx, before, by)
	}
	return 0, errors.New("this scheduler client cannot drop audit entries (POST /v1/audit/drop)")
}
