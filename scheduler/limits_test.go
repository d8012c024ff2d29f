package scheduler

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestSubmitLimits checks the limits a submission gets: each zero one is
// its default, each one from the minimum to the maximum is kept, and one
// outside is refused with a 400 naming the field and its bounds.
func TestSubmitLimits(t *testing.T) {
	base := func(edit func(*api.StepRequest)) api.StepRequest {
		r := api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	def, lo, hi := cluster.DefaultLimits, cluster.MinLimits, cluster.MaxLimits
	for _, tc := range []struct {
		name string
		req  api.StepRequest
		want cluster.Limits
		// msg, if set, is what the refusal must say.
		msg []string
	}{
		{name: "none asked: the defaults", req: base(nil), want: def},
		{name: "every maximum", req: base(func(r *api.StepRequest) {
			r.Pids, r.Timeout, r.WorkspaceBytes, r.OutputBytes = hi.Pids, api.Duration(hi.Timeout), hi.WorkspaceBytes, hi.OutputBytes
		}), want: hi},
		{name: "every minimum", req: base(func(r *api.StepRequest) {
			r.Pids, r.Timeout, r.WorkspaceBytes, r.OutputBytes = lo.Pids, api.Duration(lo.Timeout), lo.WorkspaceBytes, lo.OutputBytes
		}), want: lo},
		{name: "one set, the others default", req: base(func(r *api.StepRequest) { r.Pids = 100 }),
			want: cluster.Limits{Pids: 100, Timeout: def.Timeout, WorkspaceBytes: def.WorkspaceBytes, OutputBytes: def.OutputBytes}},
		{name: "pids over", req: base(func(r *api.StepRequest) { r.Pids = hi.Pids + 1 }), msg: []string{`field "pids"`, "4097", "want 16 to 4096"}},
		{name: "pids under", req: base(func(r *api.StepRequest) { r.Pids = lo.Pids - 1 }), msg: []string{`field "pids"`, "want 16 to 4096"}},
		{name: "pids negative", req: base(func(r *api.StepRequest) { r.Pids = -1 }), msg: []string{`field "pids"`, "-1"}},
		{name: "timeout over", req: base(func(r *api.StepRequest) { r.Timeout = api.Duration(hi.Timeout + time.Second) }),
			msg: []string{`field "timeout"`, "24h0m1s", "want 1s to 24h0m0s"}},
		{name: "timeout negative", req: base(func(r *api.StepRequest) { r.Timeout = api.Duration(-time.Second) }), msg: []string{`field "timeout"`}},
		{name: "workspace over", req: base(func(r *api.StepRequest) { r.WorkspaceBytes = hi.WorkspaceBytes + 1 }),
			msg: []string{`field "workspace_bytes"`, "want 1048576 to 68719476736"}},
		{name: "workspace under", req: base(func(r *api.StepRequest) { r.WorkspaceBytes = lo.WorkspaceBytes - 1 }), msg: []string{`field "workspace_bytes"`}},
		{name: "output over", req: base(func(r *api.StepRequest) { r.OutputBytes = hi.OutputBytes + 1 }),
			msg: []string{`field "output_bytes"`, "want 65536 to 1073741824"}},
		{name: "output under", req: base(func(r *api.StepRequest) { r.OutputBytes = lo.OutputBytes - 1 }), msg: []string{`field "output_bytes"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := specFromRequest(tc.req)
			if tc.msg != nil {
				e := errorOf(err)
				if err == nil || e.Status != http.StatusBadRequest || e.Code != api.CodeBadRequest {
					t.Fatalf("specFromRequest() = %+v, %v; want a 400", spec, err)
				}
				for _, m := range tc.msg {
					if !strings.Contains(e.Message, m) {
						t.Errorf("specFromRequest() = %q, want it to say %q", e.Message, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("specFromRequest() = %v", err)
			}
			if got := limitsOfSpec(spec); got != tc.want || spec.Pids == 0 || spec.Timeout == 0 || spec.WorkspaceBytes == 0 || spec.OutputBytes == 0 {
				t.Errorf("spec limits = %+v (spec %+v), want %+v, all set", got, spec, tc.want)
			}
			// The answer shows the limits in force.
			r := requestOf(spec)
			if got := (cluster.Limits{Pids: r.Pids, Timeout: time.Duration(r.Timeout), WorkspaceBytes: r.WorkspaceBytes, OutputBytes: r.OutputBytes}); got != tc.want {
				t.Errorf("requestOf() limits = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestOldStepShowsDefaultLimits checks that a step recorded before limits
// existed (zero limits) shows the defaults its agent applies.
func TestOldStepShowsDefaultLimits(t *testing.T) {
	r := requestOf(spec(1, gib, false))
	got := cluster.Limits{Pids: r.Pids, Timeout: time.Duration(r.Timeout), WorkspaceBytes: r.WorkspaceBytes, OutputBytes: r.OutputBytes}
	if got != cluster.DefaultLimits {
		t.Errorf("requestOf(old spec) limits = %+v, want %+v", got, cluster.DefaultLimits)
	}
}

// TestNewChecksBounds checks that New refuses each bound of the
// configuration outside its range, and accepts the defaults and maxima.
func TestNewChecksBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" accepts
	}{
		{"defaults", func(*Config) {}, ""},
		{"maxima", func(c *Config) {
			c.QueueTimeout, c.StartTimeout, c.CreateTimeout, c.StepRetention = MaxQueueTimeout, MaxStartTimeout, MaxCreateTimeout, MaxStepRetention
			c.HTTP = HTTPTimeouts{Header: MaxHTTPTimeout, Request: MaxHTTPTimeout, Snapshot: MaxHTTPTimeout, Idle: MaxHTTPTimeout}
		}, ""},
		{"queue timeout zero", func(c *Config) { c.QueueTimeout = 0 }, "queue timeout"},
		{"queue timeout over", func(c *Config) { c.QueueTimeout = MaxQueueTimeout + 1 }, "queue timeout"},
		{"start timeout over", func(c *Config) { c.StartTimeout = MaxStartTimeout + 1 }, "start timeout"},
		{"create timeout under start", func(c *Config) { c.CreateTimeout = c.StartTimeout - 1 }, "create timeout"},
		{"create timeout over", func(c *Config) { c.CreateTimeout = MaxCreateTimeout + 1 }, "create timeout"},
		{"retention zero", func(c *Config) { c.StepRetention = 0 }, "step retention"},
		{"retention over", func(c *Config) { c.StepRetention = MaxStepRetention + 1 }, "step retention"},
		{"http timeout zero", func(c *Config) { c.HTTP.Request = 0 }, "http request timeout"},
		{"idle timeout over", func(c *Config) { c.HTTP.Idle = MaxHTTPTimeout + 1 }, "http idle timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serverConfig(t, "m1")
			d := DefaultConfig()
			cfg.QueueTimeout, cfg.StartTimeout, cfg.CreateTimeout, cfg.StepRetention, cfg.HTTP = d.QueueTimeout, d.StartTimeout, d.CreateTimeout, d.StepRetention, d.HTTP
			tc.edit(&cfg)
			_, err := New(cfg, testLogger(t))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("New() = %v, want %q", err, tc.want)
			}
		})
	}
}
