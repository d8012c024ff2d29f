package agentd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// fakePoolRuntime makes sandboxes that are only structs (no containerd).
type fakePoolRuntime struct {
	mu        sync.Mutex
	made      int
	destroyed map[string]bool
	fail      error
	broken    map[string]error
}

func (f *fakePoolRuntime) defaultClass(context.Context, string) (poolClass, error) {
	return testClass, nil
}

func (f *fakePoolRuntime) makePooled(_ context.Context, c poolClass) (*Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	f.made++
	return &Sandbox{id: fmt.Sprintf("pool-%d", f.made), class: &c, madeAt: time.Now()}, nil
}

func (f *fakePoolRuntime) memory(*Sandbox) int64 { return 100 << 20 }

func (f *fakePoolRuntime) check(_ context.Context, sb *Sandbox) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.broken[sb.id]
}

func (f *fakePoolRuntime) destroy(_ context.Context, sb *Sandbox) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.destroyed[sb.id] {
		return fmt.Errorf("sandbox %s destroyed twice", sb.id)
	}
	f.destroyed[sb.id] = true
	return nil
}

func (f *fakePoolRuntime) counts() (made, destroyed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.made, len(f.destroyed)
}

var testClass = poolClass{Image: "base", Digest: "sha256:1", Network: true, WorkspaceBytes: 1 << 30, Pids: 1024}

func newFakePool(t *testing.T, budget int64) (*Pool, *fakePoolRuntime) {
	t.Helper()
	f := &fakePoolRuntime{destroyed: map[string]bool{}, broken: map[string]error{}}
	cfg := DefaultPoolConfig()
	cfg.MemoryBudget = budget
	p, err := newPool(cfg, f, nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}

// TestPoolTake: Run keeps one sandbox of the default class ready, Take
// hands it out once and marks it claimed, Run replaces it, and Close
// destroys exactly the sandboxes never taken.
func TestPoolTake(t *testing.T) {
	p, f := newFakePool(t, 1<<30)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	ready := func() error {
		if s := p.Status(); s.Ready < 1 {
			return fmt.Errorf("status %+v, want a ready sandbox", *s)
		}
		return nil
	}
	testenv.Eventually(t, 5*time.Second, ready)
	sb, ok := p.Take(testClass)
	if !ok || !sb.claimed {
		t.Fatalf("Take(default class) = %v, %v; want a claimed sandbox", sb, ok)
	}
	other := testClass
	other.Pids = 64
	if sb2, ok := p.Take(other); ok {
		t.Errorf("Take(class never made) = %s, want a miss", sb2.id)
	}
	testenv.Eventually(t, 5*time.Second, ready)
	sb2, ok := p.Take(testClass)
	if !ok || sb2 == sb {
		t.Fatalf("second Take = %v, %v; want another sandbox", sb2, ok)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil on cancel", err)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Errorf("Close() = %v", err)
	}
	made, destroyed := f.counts()
	if destroyed != made-2 || f.destroyed[sb.id] || f.destroyed[sb2.id] {
		t.Errorf("after Close: %d made, %d destroyed (%v); want all but the 2 taken destroyed by the pool", made, destroyed, f.destroyed)
	}
	if _, ok := p.Take(testClass); ok {
		t.Errorf("Take after Close: a hit, want a miss")
	}
}

// TestPoolAddPanicsOnClaimed: a sandbox once claimed, or bound to a step,
// can never go back into the pool.
func TestPoolAddPanicsOnClaimed(t *testing.T) {
	p, _ := newFakePool(t, 1<<30)
	c := testClass
	for _, tt := range []struct {
		name string
		sb   *Sandbox
	}{
		{"claimed", &Sandbox{id: "a", class: &c, claimed: true}},
		{"with a step", &Sandbox{id: "b", class: &c, step: Step{ID: "s-1"}}},
		{"cold", &Sandbox{id: "c", step: Step{ID: "s-2"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("add(%s sandbox) did not panic", tt.name)
				}
			}()
			p.add(tt.sb)
		})
	}
	if s := p.Status(); s.Ready != 0 {
		t.Errorf("Status() = %+v after refused adds, want none ready", *s)
	}
}

// TestPoolTargets: demand raises a class's target, the budget bounds the
// sum, and the default class keeps one.
func TestPoolTargets(t *testing.T) {
	p, _ := newFakePool(t, 5*110<<20)
	def := testClass
	p.def = &def
	hot := testClass
	hot.Pids = 64
	for range 20 {
		p.Take(hot)
	}
	p.mu.Lock()
	got := p.targetsLocked(p.now())
	p.mu.Unlock()
	if got[def] != 1 || got[hot] < 2 || got[def]+got[hot] > 5 {
		t.Errorf("targets after 20 claims of one class = %v, want the default 1 and the hot class more, at most 5 in all", got)
	}
}

// TestPoolMinReady: --warm-pool-min keeps that many of the default class
// before any demand, and the budget still bounds it.
func TestPoolMinReady(t *testing.T) {
	for _, tc := range []struct {
		min, budgetSandboxes, want int
	}{{0, 5, 1}, {3, 5, 3}, {8, 5, 5}} {
		p, _ := newFakePool(t, int64(tc.budgetSandboxes)*110<<20)
		p.cfg.MinReady = tc.min
		def := testClass
		p.def = &def
		p.mu.Lock()
		got := p.targetsLocked(p.now())
		p.mu.Unlock()
		if got[def] != tc.want || len(got) != 1 {
			t.Errorf("min %d, budget of %d sandboxes: targets %v, want %d of the default class", tc.min, tc.budgetSandboxes, got, tc.want)
		}
	}
	cfg := DefaultPoolConfig()
	cfg.MemoryBudget, cfg.MinReady = 1<<30, -1
	if _, err := newPool(cfg, &fakePoolRuntime{}, nil, testenv.Logger(t)); err == nil || !strings.Contains(err.Error(), "minimum of -1") {
		t.Errorf("newPool(MinReady -1) = %v, want the minimum named", err)
	}
}

// TestPoolMakeFailures: three failed makes in a row make the node
// degraded, with the reason, until one succeeds.
func TestPoolMakeFailures(t *testing.T) {
	p, f := newFakePool(t, 1<<30)
	def := testClass
	p.def = &def
	f.fail = fmt.Errorf("runsc exploded")
	for range 3 {
		p.tend(t.Context())
	}
	if h := p.Health(); len(h) != 1 {
		t.Errorf("Health() after 3 failed makes = %q, want one reason", h)
	}
	f.fail = nil
	p.tend(t.Context())
	if h := p.Health(); len(h) != 0 {
		t.Errorf("Health() after a make worked = %q, want none", h)
	}
	p.Close(t.Context())
}

// TestPoolDiskBound: a make the node's disk refuses leaves the node ready
// (the pool stays at its size and waits before it tries again), and Shed
// gives a refused step the disk of a ready sandbox.
func TestPoolDiskBound(t *testing.T) {
	p, f := newFakePool(t, 1<<30)
	p.cfg.MinReady = 3
	def := testClass
	p.def = &def
	p.tend(t.Context())
	p.tend(t.Context())
	f.fail = fmt.Errorf("%w: 1GiB free", ErrLowDisk)
	for range 5 {
		if next := p.tend(t.Context()); next <= time.Second {
			t.Errorf("tend after a disk refusal: again in %v, want the disk-bound wait", next)
		}
		p.diskBoundUntil = time.Time{} // try again at once
	}
	if h := p.Health(); len(h) != 0 {
		t.Errorf("Health() after 5 makes the disk refused = %q, want none (the node still takes steps)", h)
	}
	if !p.Shed(t.Context()) {
		t.Fatal("Shed() with 2 ready = false")
	}
	if made, destroyed := f.counts(); made != 2 || destroyed != 1 {
		t.Errorf("after Shed: %d made, %d destroyed; want 2 and 1", made, destroyed)
	}
	f.fail = nil
	if next := p.tend(t.Context()); next < time.Second {
		t.Errorf("tend right after Shed: again in %v, want a wait (the step has the disk first)", next)
	}
	if made, _ := f.counts(); made != 2 {
		t.Errorf("tend right after Shed made a sandbox (%d made)", made)
	}
	if !p.Shed(t.Context()) || p.Shed(t.Context()) {
		t.Error("Shed() with one ready, then none: want true, then false")
	}
	var none *Pool
	if none.Shed(t.Context()) {
		t.Error("Shed() of no pool = true")
	}
	p.Close(t.Context())
}

// TestPoolCheck: a ready sandbox that fails its host-side check is
// destroyed (never claimed) and replaced.
func TestPoolCheck(t *testing.T) {
	p, f := newFakePool(t, 1<<30)
	def := testClass
	p.def = &def
	p.checked = time.Now() // no check on the first round
	p.tend(t.Context())
	p.mu.Lock()
	sb := p.ready[def][0]
	p.mu.Unlock()
	f.mu.Lock()
	f.broken[sb.id] = fmt.Errorf("pause gone")
	f.mu.Unlock()
	p.checked = time.Time{}
	p.tend(t.Context())
	if _, destroyed := f.counts(); destroyed != 1 || !f.destroyed[sb.id] {
		t.Errorf("after a failed check: destroyed %v, want %s", f.destroyed, sb.id)
	}
	if got, ok := p.Take(def); !ok || got == sb {
		t.Errorf("Take after the check = %v, %v; want a new sandbox", got, ok)
	}
	p.Close(t.Context())
}
