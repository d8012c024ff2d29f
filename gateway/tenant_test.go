package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestTenantStore: two tenants with the same ids never see each other's
// records, lists page within the tenant (cursors included), and a scoped
// access without a tenant is an error, never a global read.
func TestTenantStore(t *testing.T) {
	raw := newTestScheduler(t).store
	s := newTenantStore(raw)
	a, b := withTenant(t.Context(), "acct-aaa"), withTenant(t.Context(), "acct-bbb")
	for i := range 5 {
		id := fmt.Sprintf("run-%d", i)
		if _, err := s.PutRecord(a, kindRun, id, 0, json.RawMessage(`{"who":"a"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutRecord(b, kindRun, id, 0, json.RawMessage(`{"who":"b"}`)); err != nil {
			t.Fatalf("PutRecord(b, %s) = %v, want b's own record made", id, err)
		}
	}
	rec, err := s.GetRecord(a, kindRun, "run-3")
	if err != nil || rec.ID != "run-3" || string(rec.Value) != `{"who":"a"}` {
		t.Errorf("GetRecord(a, run-3) = %+v, %v; want a's record under its own id", rec, err)
	}
	if _, err := s.GetRecord(a, kindRun, "acct-bbb.run-3"); !IsNotFound(err) {
		t.Errorf("GetRecord(a, b's raw id) = %v, want not found", err)
	}
	// Page two at a time through a's runs.
	var ids []string
	cursor := ""
	for range 10 {
		recs, next, err := s.ListRecordsPage(a, kindRun, "", 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if string(r.Value) != `{"who":"a"}` {
				t.Errorf("a's list holds %s = %s", r.ID, r.Value)
			}
			ids = append(ids, r.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if want := []string{"run-0", "run-1", "run-2", "run-3", "run-4"}; !slices.Equal(ids, want) {
		t.Errorf("a's runs = %v, want %v", ids, want)
	}
	// b deletes its run-0; a's stays.
	if err := s.DeleteRecord(b, kindRun, "run-0", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRecord(a, kindRun, "run-0"); err != nil {
		t.Errorf("a's run-0 after b deleted its own = %v", err)
	}
	// No tenant: every scoped access is refused.
	ctx := t.Context()
	if _, err := s.GetRecord(ctx, kindRun, "run-1"); !errors.Is(err, errNoTenant) {
		t.Errorf("GetRecord without a tenant = %v, want errNoTenant", err)
	}
	if _, _, err := s.ListRecordsPage(ctx, kindRun, "", 10, ""); !errors.Is(err, errNoTenant) {
		t.Errorf("ListRecordsPage without a tenant = %v, want errNoTenant", err)
	}
	if _, err := s.PutRecord(ctx, kindRun, "run-9", 0, json.RawMessage(`{}`)); !errors.Is(err, errNoTenant) {
		t.Errorf("PutRecord without a tenant = %v, want errNoTenant", err)
	}
	if err := s.DeleteRecord(ctx, kindRun, "run-1", 1); !errors.Is(err, errNoTenant) {
		t.Errorf("DeleteRecord without a tenant = %v, want errNoTenant", err)
	}
	// Global kinds pass through, with or without a tenant.
	if _, err := s.PutRecord(a, kindTenant, "acct-aaa", 0, json.RawMessage(`{"id":"acct-aaa"}`)); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.GetRecord(ctx, kindTenant, "acct-aaa"); err != nil || rec.ID != "acct-aaa" {
		t.Errorf("GetRecord(tenant) without a tenant = %+v, %v; want the global record", rec, err)
	}
	if _, err := s.GetRecord(a, "no_such_kind", "x"); err == nil {
		t.Error("GetRecord of an unclassified kind succeeded, want an error")
	}
}
