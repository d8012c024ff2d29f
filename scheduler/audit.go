package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"
)

// The audit log by tenant: every entry names its tenant (AuditEntry), a
// listing names the tenant it reads (AuditFilter), and a tenant's entries
// are indexed apart so that reading one tenant's costs nothing of the
// others'.

// maxAuditField bounds an entry's tenant, who and action.
const maxAuditField = 200

// auditScanBudget is how many entries one page of GET /v1/audit examines
// at most: a page with a filter may then hold fewer than its limit (even
// none) and still have a next cursor.
const auditScanBudget = 10000

// AuditFilter selects audit entries (api.AuditFilter is its public form):
// those of Tenant ("" for the entries without a tenant) unless
// AllTenants, then, when set, those by Who, of Action, at or after Since
// and before Until.
type AuditFilter struct {
	AllTenants          bool
	Tenant, Who, Action string
	Since, Until        time.Time
}

func (f *AuditFilter) match(e *AuditEntry) bool {
	return (f.AllTenants || e.Tenant == f.Tenant) &&
		(f.Who == "" || e.Who == f.Who) &&
		(f.Action == "" || e.Action == f.Action) &&
		(f.Since.IsZero() || !e.Time.Before(f.Since)) &&
		(f.Until.IsZero() || e.Time.Before(f.Until))
}

// validateAuditFields checks an entry's tenant, who and action: at most
// 200 bytes of UTF-8 without control characters each. Errors wrap
// ErrInvalid and name the field.
func validateAuditFields(tenant, who, action string) error {
	for _, f := range []struct{ name, v string }{{"tenant", tenant}, {"who", who}, {"action", action}} {
		switch {
		case len(f.v) > maxAuditField:
			return fmt.Errorf("%s %.20q...: %d bytes, at most %d: %w", f.name, f.v, len(f.v), maxAuditField, ErrInvalid)
		case !utf8.ValidString(f.v):
			return fmt.Errorf("%s %q: not UTF-8: %w", f.name, f.v, ErrInvalid)
		case containsControl(f.v):
			return fmt.Errorf("%s %q: has a control character: %w", f.name, f.v, ErrInvalid)
		}
	}
	return nil
}

func containsControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// addAudit appends e, numbered after the last entry, to the log and to
// its tenant's index. The caller holds mu for writing.
func (st *State) addAudit(e *AuditEntry) {
	st.audit = append(st.audit, e)
	st.auditByTenant[e.Tenant] = append(st.auditByTenant[e.Tenant], e)
}

// indexAudit rebuilds the index by tenant from the log (a restore, a drop
// of every tenant's entries). The caller holds mu for writing.
func (st *State) indexAudit() {
	st.auditByTenant = make(map[string][]*AuditEntry)
	for _, e := range st.audit {
		st.auditByTenant[e.Tenant] = append(st.auditByTenant[e.Tenant], e)
	}
}

// AuditPage returns at most limit entries that match f, numbered above
// after, in sequence order, and the after of the page that follows (the
// last entry it examined); more is false when it read to the end of the
// log. It examines at most auditScanBudget entries (of f's tenant only,
// unless f.AllTenants), so a page costs the same however long the log.
func (st *State) AuditPage(f AuditFilter, after uint64, limit int) (entries []AuditEntry, next uint64, more bool) {
	return st.auditPage(f, after, limit, auditScanBudget)
}

func (st *State) auditPage(f AuditFilter, after uint64, limit, budget int) (entries []AuditEntry, next uint64, more bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	src := st.audit
	if !f.AllTenants {
		src = st.auditByTenant[f.Tenant]
	}
	i, _ := slices.BinarySearchFunc(src, after+1, func(e *AuditEntry, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	entries = []AuditEntry{}
	if limit <= 0 {
		return entries, after, i < len(src)
	}
	next = after
	for n, e := range src[i:] {
		if len(entries) == limit || n == budget {
			return entries, next, true
		}
		next = e.Seq
		if f.match(e) {
			entries = append(entries, e.clone())
		}
	}
	return entries, next, false
}
