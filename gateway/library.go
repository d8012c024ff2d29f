package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// The account library (SPEC.md, "Workspaces and revisions"): one
// workspace of the store for each tenant, read-only at /library in
// every step the gateway submits, read by everyone in the organisation
// and written by its admins, through the same files API. Its id is kept
// in one record (kind "library", scoped, id "org"), made on first use: not a
// workspace record, so it is in no list of workspaces and no run runs in
// it.

const (
	kindLibrary = "library"
	libraryRec  = "org"
)

// libraryRecord names the library's workspace.
type libraryRecord struct {
	Workspace string    `json:"workspace"`
	CreatedAt time.Time `json:"created_at"`
}

// libraryID returns the library's workspace id, making it on first use
// (gateways racing agree by compare-and-set). It never changes, so it is
// read once per tenant.
func (g *Gateway) libraryID(ctx context.Context) (string, error) {
	rec, err := g.library(ctx)
	return rec.Workspace, err
}

// library returns the library's record, making it on first use.
func (g *Gateway) library(ctx context.Context) (libraryRecord, error) {
	g.libMu.Lock()
	defer g.libMu.Unlock()
	tenant := tenantFrom(ctx)
	if rec, ok := g.lib[tenant]; ok {
		return rec, nil
	}
	for range casTries {
		var rec libraryRecord
		_, err := getRecord(ctx, g.store, kindLibrary, libraryRec, &rec)
		if err == nil {
			if g.lib == nil {
				g.lib = map[string]libraryRecord{}
			}
			g.lib[tenant] = rec
			return rec, nil
		}
		if !IsNotFound(err) {
			return rec, fmt.Errorf("read the library record: %w", err)
		}
		rec = libraryRecord{Workspace: newID(prefixWorkspace), CreatedAt: g.now()}
		if _, err := putRecord(ctx, g.store, kindLibrary, libraryRec, 0, &rec); err != nil && !IsConflict(err) {
			return rec, fmt.Errorf("create the library record: %w", err)
		}
	}
	return libraryRecord{}, fmt.Errorf("the library record kept changing; retry")
}

// handleLibrary names the library's workspace: its files are under
// /v1/workspaces/{id}/files.
func (g *Gateway) handleLibrary(c *call) error {
	rec, err := g.library(c.ctx)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, api.Workspace{ID: rec.Workspace, Name: "library", CreatedAt: rec.CreatedAt})
}
