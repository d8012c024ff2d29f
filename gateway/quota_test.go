package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

func quotaFixture(t *testing.T, q Quotas) *fixture {
	return newFixtureWith(t, func(c *Config) { c.Quotas = q })
}

// createRun posts a one-step run as credential name in ws and returns the
// answer.
func (f *fixture) createRun(name, ws string) (int, []byte, http.Header) {
	f.t.Helper()
	w := f.serve(f.request(f.creds[name], "POST", "/v1/runs", `{"workspace":"`+ws+`","steps":[{"args":["true"]}]}`))
	return w.Code, w.Body.Bytes(), w.Header()
}

// wantQuota checks a 429 quota_exceeded answer naming want.
func wantQuota(t *testing.T, code int, body []byte, h http.Header, want string) {
	t.Helper()
	var e api.Error
	json.Unmarshal(body, &e)
	if code != http.StatusTooManyRequests || e.Detail.Code != api.CodeQuotaExceeded || h.Get("Retry-After") == "" ||
		!strings.Contains(e.Detail.Message, want) {
		t.Fatalf("run over the quota = %d %s (Retry-After %q), want 429 quota_exceeded naming %q with Retry-After", code, body, h.Get("Retry-After"), want)
	}
}

// TestQuotaLiveRuns: a workspace and a principal may have so many live
// runs; one more is refused with 429 naming the quota, and a run that
// settles frees its place.
func TestQuotaLiveRuns(t *testing.T) {
	f := quotaFixture(t, Quotas{LiveRunsPerWorkspace: 3, LiveRunsPerPrincipal: 2, QueuedStepsPerWorkspace: 100, QueuedStepsPerPrincipal: 100})
	keyID := strings.SplitN(strings.TrimPrefix(f.creds["key-editor"].bearer, keyPrefix), "_", 2)[0]
	// The fixture's run is the editor key's first.
	if code, body, _ := f.createRun("key-editor", wsMain); code != 201 {
		t.Fatalf("second run of the key = %d %s", code, body)
	}
	code, body, h := f.createRun("key-editor", wsMain)
	wantQuota(t, code, body, h, "key key-"+keyID+" has 2 live runs, its quota")
	if code, body, _ := f.createRun("editor", wsMain); code != 201 {
		t.Fatalf("third run in the workspace = %d %s", code, body)
	}
	code, body, h = f.createRun("owner", wsMain)
	wantQuota(t, code, body, h, "workspace ws-main has 3 live runs, its quota")
	// Another workspace has its own count.
	if code, body, _ := f.createRun("owner", wsOther); code != 201 {
		t.Fatalf("run in ws-other = %d %s", code, body)
	}
	// The refusal is audited with its code; the counter holds the runs.
	entries := f.store.AuditAll()
	var last api.AuditDocument
	json.Unmarshal(entries[len(entries)-2].Entry, &last)
	if last.Action != "run.create" || last.Result != api.CodeQuotaExceeded {
		t.Errorf("refused run's audit entry = %+v, want run.create with result quota_exceeded", last)
	}
	var q quotaRecord
	getRecord(t.Context(), f.store, kindQuota, wsQuotaID(wsMain), &q)
	if len(q.Runs) != 3 {
		t.Errorf("workspace counter = %q, want 3 runs", q.Runs)
	}

	// The fixture's run (two steps) ends: its place is free again.
	f.sched.Exit(stepID(f.run, 0), 0)
	f.g.Driver().Pass(t.Context())
	f.sched.Start(stepID(f.run, 1))
	f.sched.Exit(stepID(f.run, 1), 0)
	f.g.Driver().Pass(t.Context())
	if code, body, _ := f.createRun("key-editor", wsMain); code != 201 {
		t.Fatalf("run after one ended = %d %s, want 201", code, body)
	}
}

// TestQuotaQueuedSteps: a new run is refused while its workspace (or its
// creator) has so many steps no node started.
func TestQuotaQueuedSteps(t *testing.T) {
	f := quotaFixture(t, Quotas{LiveRunsPerWorkspace: 100, LiveRunsPerPrincipal: 100, QueuedStepsPerWorkspace: 2, QueuedStepsPerPrincipal: 100})
	var ops []api.Operation
	for range 2 {
		var op api.Operation
		f.do("editor", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["true"]}]}`, 201, &op)
		ops = append(ops, op)
	}
	// The fixture's step runs; the two new ones are queued.
	code, body, h := f.createRun("editor", wsMain)
	wantQuota(t, code, body, h, "workspace ws-main has 2 queued steps, its quota")
	if code, body, _ := f.createRun("editor", wsOther); code != 201 {
		t.Fatalf("run in ws-other = %d %s", code, body)
	}
	f.sched.Start(ops[0].Steps[0].ID)
	if code, body, _ := f.createRun("editor", wsMain); code != 201 {
		t.Fatalf("run once a queued step started = %d %s, want 201", code, body)
	}

	f = quotaFixture(t, Quotas{LiveRunsPerWorkspace: 100, LiveRunsPerPrincipal: 100, QueuedStepsPerWorkspace: 100, QueuedStepsPerPrincipal: 1})
	f.do("editor", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["true"]}]}`, 201, nil)
	code, body, h = f.createRun("editor", wsOther)
	wantQuota(t, code, body, h, "account "+accountID("editor@example.com")+" has 1 queued steps, its quota")
}

// TestQuotaConcurrent: creations racing on several gateways never pass
// the quota: the counter is compare-and-set.
func TestQuotaConcurrent(t *testing.T) {
	f := quotaFixture(t, Quotas{LiveRunsPerWorkspace: 6, LiveRunsPerPrincipal: 100, QueuedStepsPerWorkspace: 100, QueuedStepsPerPrincipal: 100})
	cfg := DefaultConfig()
	cfg.Site, cfg.OwnerEmail, cfg.Quotas = testSite, "", f.g.cfg.Quotas
	peer, err := New(cfg, f.raw, f.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	created := 0
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			h := f.h
			if i%2 == 1 {
				h = peer.Handler()
			}
			w := &recorder{header: http.Header{}}
			h.ServeHTTP(w, f.request(f.creds["key-editor"], "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["true"]}]}`))
			mu.Lock()
			defer mu.Unlock()
			switch w.code {
			case 201:
				created++
			case 429:
			default:
				t.Errorf("racing create = %d %s", w.code, w.body.String())
			}
		})
	}
	wg.Wait()
	if created != 5 { // the fixture's run is the sixth
		t.Errorf("%d runs created by 20 racing requests with 5 places left, want 5", created)
	}
	var q quotaRecord
	getRecord(t.Context(), f.store, kindQuota, wsQuotaID(wsMain), &q)
	if len(q.Runs) != 6 {
		t.Errorf("counter holds %d runs, want 6", len(q.Runs))
	}
}

// TestQuotaReconcile: the maintenance pass uncounts a run that was
// counted but never made (its gateway died), and a settled run whose
// uncounting was lost; it keeps a live run and one being created.
func TestQuotaReconcile(t *testing.T) {
	f := newFixture(t)
	ghost := newTimeID(prefixRun, time.Now().Add(-2*staleLive))
	young := newTimeID(prefixRun, time.Now())
	op := f.newRun(1)
	f.sched.Start(op.Steps[0].ID)
	f.sched.Exit(op.Steps[0].ID, 0)
	f.g.Driver().Pass(t.Context())
	// Put the settled run, the ghost and the young one back in the
	// counter, as a crash would have left them.
	var q quotaRecord
	v, _ := getRecord(t.Context(), f.store, kindQuota, wsQuotaID(wsMain), &q)
	q.Runs = append(q.Runs, op.ID, ghost, young)
	putRecord(t.Context(), f.store, kindQuota, wsQuotaID(wsMain), v, &q)
	res, err := f.g.Maintain(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	getRecord(t.Context(), f.store, kindQuota, wsQuotaID(wsMain), &q)
	if res.QuotaCounts != 2 || len(q.Runs) != 2 || q.Runs[0] != f.run || q.Runs[1] != young {
		t.Errorf("after reconciling: %d removed, counter %q; want the settled run and the ghost removed, [%s %s] kept", res.QuotaCounts, q.Runs, f.run, young)
	}
}

// TestQuotaSettings: each quota's default and maximum, and the check of
// its range.
func TestQuotaSettings(t *testing.T) {
	f0 := newFixture(t)
	if want := (Quotas{LiveRunsPerWorkspace: 50, LiveRunsPerPrincipal: 20, QueuedStepsPerWorkspace: 20, QueuedStepsPerPrincipal: 10}); DefaultQuotas != want {
		t.Errorf("DefaultQuotas = %+v, want %+v", DefaultQuotas, want)
	}
	if want := (Quotas{1000, 1000, 1000, 1000}); MaxQuotas != want {
		t.Errorf("MaxQuotas = %+v, want %+v", MaxQuotas, want)
	}
	if DefaultConfig().Quotas != DefaultQuotas {
		t.Errorf("DefaultConfig().Quotas = %+v, want DefaultQuotas", DefaultConfig().Quotas)
	}
	if err := DefaultQuotas.Check(); err != nil {
		t.Errorf("DefaultQuotas.Check() = %v", err)
	}
	if err := MaxQuotas.Check(); err != nil {
		t.Errorf("MaxQuotas.Check() = %v", err)
	}
	for _, tc := range []struct {
		edit func(*Quotas)
		flag string
	}{
		{func(q *Quotas) { q.LiveRunsPerWorkspace = 0 }, "quota-live-runs-per-workspace 0"},
		{func(q *Quotas) { q.LiveRunsPerWorkspace = 1001 }, "quota-live-runs-per-workspace 1001"},
		{func(q *Quotas) { q.LiveRunsPerPrincipal = 1001 }, "quota-live-runs-per-principal 1001"},
		{func(q *Quotas) { q.QueuedStepsPerWorkspace = -1 }, "quota-queued-steps-per-workspace -1"},
		{func(q *Quotas) { q.QueuedStepsPerPrincipal = 1001 }, "quota-queued-steps-per-principal 1001"},
	} {
		q := DefaultQuotas
		tc.edit(&q)
		if err := q.Check(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Check(%+v) = %v, want an error naming %q", q, err, tc.flag)
		}
		cfg := DefaultConfig()
		cfg.Quotas = q
		if _, err := New(cfg, f0.store, f0.sched, nil); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("New with quotas %+v = %v, want an error naming %q", q, err, tc.flag)
		}
	}
}

// recorder is a minimal concurrent-safe ResponseWriter.
type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}
