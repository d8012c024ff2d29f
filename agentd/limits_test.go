package agentd

import (
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// TestStepLimits: an assignment's zero limits get cluster.DefaultLimits,
// limits past the node's maxima are refused naming the limit and the
// flag, and the node's maxima default to cluster.MaxLimits.
func TestStepLimits(t *testing.T) {
	max := nodeMaxLimits(cluster.Limits{Pids: 100, Timeout: time.Minute})
	if want := (cluster.Limits{Pids: 100, Timeout: time.Minute, WorkspaceBytes: cluster.MaxLimits.WorkspaceBytes, OutputBytes: cluster.MaxLimits.OutputBytes}); max != want {
		t.Fatalf("nodeMaxLimits() = %+v, want %+v", max, want)
	}
	if got := nodeMaxLimits(cluster.Limits{}); got != cluster.MaxLimits {
		t.Errorf("nodeMaxLimits(zero) = %+v, want cluster.MaxLimits %+v", got, cluster.MaxLimits)
	}
	for _, tt := range []struct {
		name    string
		spec    cluster.StepSpec
		max     cluster.Limits
		want    cluster.Limits
		wantErr string
	}{
		{"old record with no limits", cluster.StepSpec{}, cluster.MaxLimits, cluster.DefaultLimits, ""},
		{"own limits kept", cluster.StepSpec{Pids: 64, Timeout: time.Minute, WorkspaceBytes: 8 << 20, OutputBytes: 1 << 20}, cluster.MaxLimits,
			cluster.Limits{Pids: 64, Timeout: time.Minute, WorkspaceBytes: 8 << 20, OutputBytes: 1 << 20}, ""},
		{"at the maximum", cluster.StepSpec{Pids: cluster.MaxLimits.Pids, Timeout: cluster.MaxLimits.Timeout, WorkspaceBytes: cluster.MaxLimits.WorkspaceBytes, OutputBytes: cluster.MaxLimits.OutputBytes},
			cluster.MaxLimits, cluster.MaxLimits, ""},
		{"pids past the node's", cluster.StepSpec{Pids: 101}, max, cluster.Limits{}, "step limit pids 101 exceeds this node's maximum of 100 (agentd serve --max-pids)"},
		{"default timeout past the node's", cluster.StepSpec{Pids: 50}, max, cluster.Limits{}, "step limit timeout 1h0m0s exceeds this node's maximum of 1m0s (agentd serve --max-timeout)"},
		{"workspace", cluster.StepSpec{WorkspaceBytes: 65<<30 + 1}, cluster.MaxLimits, cluster.Limits{}, "--max-workspace"},
		{"output", cluster.StepSpec{OutputBytes: 2 << 30}, cluster.MaxLimits, cluster.Limits{}, "--max-output"},
		{"below the minimum", cluster.StepSpec{Pids: 3}, cluster.MaxLimits, cluster.Limits{}, "step limit pids 3: want 16 to 4096"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := stepLimits(tt.spec, tt.max)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("stepLimits(%+v) = %v, want an error containing %q", tt.spec, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("stepLimits(%+v) = %+v, %v; want %+v", tt.spec, got, err, tt.want)
			}
		})
	}
}

// TestStepDefaults: the runtime gives a step that names no pids limit or
// workspace size the defaults, so a sandbox always has both.
func TestStepDefaults(t *testing.T) {
	got := Step{}.withDefaults()
	if got.Limits.Pids != cluster.DefaultLimits.Pids || got.WorkspaceBytes != cluster.DefaultLimits.WorkspaceBytes {
		t.Errorf("Step{}.withDefaults() = pids %d, workspace %d; want %d, %d", got.Limits.Pids, got.WorkspaceBytes, cluster.DefaultLimits.Pids, cluster.DefaultLimits.WorkspaceBytes)
	}
	own := Step{WorkspaceBytes: 2 << 20}
	own.Limits.Pids = 20
	if got := own.withDefaults(); got.Limits.Pids != 20 || got.WorkspaceBytes != 2<<20 {
		t.Errorf("withDefaults() changed a step's own limits: %+v", got)
	}
}

func TestThreshold(t *testing.T) {
	for _, tt := range []struct {
		in    string
		total uint64
		want  uint64
		bad   bool
	}{
		{"10%", 1000, 100, false},
		{"0.5%", 1000, 5, false},
		{"5g", 1 << 40, 5 << 30, false},
		{"1000", 1 << 40, 1000, false},
		{"100%", 0, 0, true},
		{"-1%", 0, 0, true},
		{"lots", 0, 0, true},
	} {
		th, err := ParseThreshold(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseThreshold(%q) = %v, want an error", tt.in, th)
			}
			continue
		}
		if err != nil || th.Of(tt.total) != tt.want {
			t.Errorf("ParseThreshold(%q).Of(%d) = %d, %v; want %d", tt.in, tt.total, th.Of(tt.total), err, tt.want)
		}
	}
	if DefaultMinFreeDisk.String() != "10%" || DefaultMinFreeInodes.String() != "5%" {
		t.Errorf("default thresholds %s and %s, want 10%% and 5%%", DefaultMinFreeDisk, DefaultMinFreeInodes)
	}
}

func TestFmtBytes(t *testing.T) {
	for in, want := range map[int64]string{0: "0B", 512: "512B", 1 << 30: "1GiB", 3<<30 + 1<<29: "3.5GiB", 64 << 20: "64MiB"} {
		if got := fmtBytes(in); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
