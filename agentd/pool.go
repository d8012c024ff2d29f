package agentd

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// PoolConfig configures a node's warm pool (agentd serve --warm-pool-*).
type PoolConfig struct {
	// MemoryBudget bounds the memory of the pool's sandboxes, ready and
	// being made or destroyed (--warm-pool-memory); zero turns the pool off.
	MemoryBudget int64
	// MaxClasses bounds the classes the pool keeps sandboxes of
	// (--warm-pool-classes).
	MaxClasses int
	// MaxAge is how long a ready sandbox waits before it is replaced
	// (--warm-pool-max-age), so that runsc and image upgrades take effect.
	MaxAge time.Duration
	// DefaultImage is the image of the node's default class, of which
	// one sandbox is kept ready whatever the demand (the probe's image).
	DefaultImage string
	// MinReady is how many sandboxes of the default class are kept
	// ready whatever the demand (--warm-pool-min; at least 1), within
	// the budget: the floor for bursts larger than the demand seen.
	MinReady int
}

// DefaultPoolConfig returns the defaults of `agentd serve`: the pool is
// off until a budget is given.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{MaxClasses: 8, MaxAge: 30 * time.Minute, DefaultImage: "rodon.local/base:latest"}
}

// poolClass is what a pooled sandbox is made for before any step: the
// parts of its spec fixed when its sandbox boots. CPU and memory are not
// among them: a claim writes them to the host's cgroups. The pids limit
// is, because gVisor sets RLIMIT_NPROC of every exec from the spec it
// booted with; the workspace size and read-only flag are, because the
// workspace filesystem is mounted before the sandbox starts.
type poolClass struct {
	// Image is the image reference, Digest what it named when the class
	// was taken: a rebuilt image is another class.
	Image, Digest  string
	Network        bool
	WorkspaceBytes int64
	Pids           int64
	ReadOnly       bool
}

// key is the class's short name in metrics and logs: 8 hex digits.
func (c poolClass) key() string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s|%s|%v|%d|%d|%v", c.Image, c.Digest, c.Network, c.WorkspaceBytes, c.Pids, c.ReadOnly)
	return fmt.Sprintf("%08x", h.Sum32())
}

// poolRuntime is what the pool needs of the runtime (Runtime; a fake in
// the pool's unit tests).
type poolRuntime interface {
	// defaultClass is the node's default class for image.
	defaultClass(ctx context.Context, image string) (poolClass, error)
	// makePooled prepares a sandbox of class c, without a step.
	makePooled(ctx context.Context, c poolClass) (*Sandbox, error)
	// memory is what sb uses now, in bytes (0 if unknown).
	memory(sb *Sandbox) int64
	// destroy destroys a sandbox that left the pool unclaimed.
	destroy(ctx context.Context, sb *Sandbox) error
	// check says what is wrong with a ready sandbox, from the host.
	check(ctx context.Context, sb *Sandbox) error
}

// Pool is a node's warm pool: sandboxes of the classes steps ask for,
// prepared ahead of demand (Runtime.prepare, up to the running pause),
// each given to exactly one step and destroyed after it. Take removes a
// sandbox from the pool for good; nothing puts one back.
//
// Run makes and replaces sandboxes until its context ends; Close then
// destroys the ready ones. Take, Status and Health may be called from any
// goroutine, also while Run runs.
type Pool struct {
	cfg     PoolConfig
	rt      poolRuntime
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
	wake    chan struct{}

	mu sync.Mutex
	// ready are the sandboxes waiting for a step, oldest first.
	ready map[poolClass][]*Sandbox
	// demand is what steps asked for, by class (at most MaxClasses).
	demand map[poolClass]*classDemand
	// def is the node's default class, once known.
	def                  *poolClass
	creating, destroying int
	// cost is the memory of one sandbox (an average of those measured).
	cost float64
	// makeTimes are the last times taken to make a sandbox.
	makeTimes []time.Duration
	// failures counts consecutive failed makes and claims; failReason is
	// the last one's, and limitsFailed says a claim's limits did not read
	// back (a required control is missing).
	failures     int
	failReason   string
	limitsFailed bool
	closed       bool
	// diskBound says the last make was refused for the node's disk, and
	// until when the pool makes nothing (also after Shed).
	diskBound      bool
	diskBoundUntil time.Time
	// checked is when the ready sandboxes were last checked; lastTake
	// when a step last asked for one.
	checked, lastTake time.Time
}

// classDemand is what a class was asked for.
type classDemand struct {
	// rate is claims per second, decayed with a half-life of demandHalfLife
	// from at.
	rate float64
	at   time.Time
	// perSecond counts claims by Unix second over the last peakWindow.
	perSecond map[int64]int
}

const (
	demandHalfLife = 30 * time.Second
	peakWindow     = 10 * time.Minute
	// initialCost is a pooled sandbox's memory before one was measured
	// (RUNTIME-NOTES: about 103 MB RSS idle).
	initialCost = 110 << 20
	// shimOverhead is the memory of a sandbox's shim, outside its cgroup
	// (docs/BENCHMARKS.md, idle memory per pooled sandbox: about 25 MB;
	// the shim waits for the sandbox itself, with no `runsc wait`).
	shimOverhead = 25 << 20
	// poolFailLimit consecutive failures make the node degraded.
	poolFailLimit = 3
	// checkEvery is how often the ready sandboxes are checked.
	checkEvery = 30 * time.Second
)

// NewPool wires a pool; it starts nothing (Run does).
func NewPool(cfg PoolConfig, rt *Runtime, metrics *Metrics, logger *slog.Logger) (*Pool, error) {
	return newPool(cfg, rt, metrics, logger)
}

func newPool(cfg PoolConfig, rt poolRuntime, metrics *Metrics, logger *slog.Logger) (*Pool, error) {
	switch {
	case cfg.MemoryBudget <= 0:
		return nil, fmt.Errorf("warm pool: memory budget %d: must be positive (zero turns the pool off)", cfg.MemoryBudget)
	case cfg.MaxClasses <= 0:
		return nil, fmt.Errorf("warm pool: %d classes: want at least 1", cfg.MaxClasses)
	case cfg.MaxAge <= 0:
		return nil, fmt.Errorf("warm pool: max age %v: must be positive", cfg.MaxAge)
	case cfg.MinReady < 0:
		return nil, fmt.Errorf("warm pool: minimum of %d ready sandboxes: must not be negative", cfg.MinReady)
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	metrics.pool.budget.Set(float64(cfg.MemoryBudget))
	return &Pool{
		cfg: cfg, rt: rt, metrics: metrics, now: time.Now,
		logger: logger.With("component", "pool"),
		wake:   make(chan struct{}, 1),
		ready:  map[poolClass][]*Sandbox{},
		demand: map[poolClass]*classDemand{},
		cost:   initialCost,
	}, nil
}

// Take removes a ready sandbox of class c from the pool and marks it
// claimed: its caller owns it (Runtime.Claim, then Destroy after its one
// step). It also counts the demand for c, hit or miss.
func (p *Pool) Take(c poolClass) (*Sandbox, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.poke()
	p.countDemand(c)
	p.lastTake = p.now()
	q := p.ready[c]
	if p.closed || len(q) == 0 {
		p.metrics.pool.claims.WithLabelValues("miss").Inc()
		return nil, false
	}
	sb := q[0]
	p.ready[c] = q[1:]
	if len(p.ready[c]) == 0 {
		delete(p.ready, c)
	}
	sb.claimed = true
	p.metrics.pool.claims.WithLabelValues("hit").Inc()
	p.gaugesLocked()
	return sb, true
}

// add puts a sandbox Run just made into the pool. A sandbox that was
// claimed or has a step can never be added: that would be a second step
// in one sandbox, so add panics.
func (p *Pool) add(sb *Sandbox) {
	if sb.claimed || sb.step.ID != "" || sb.class == nil {
		panic(fmt.Sprintf("warm pool: sandbox %s was claimed (step %q) and can never go back", sb.id, sb.step.ID))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready[*sb.class] = append(p.ready[*sb.class], sb)
	p.gaugesLocked()
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Pool) countDemand(c poolClass) {
	d := p.demand[c]
	if d == nil {
		if len(p.demand) >= p.cfg.MaxClasses && !p.evictDemandLocked() {
			return // too many classes: this one stays cold
		}
		d = &classDemand{perSecond: map[int64]int{}}
		p.demand[c] = d
	}
	now := p.now()
	d.rate = d.rateAt(now) + math.Ln2/demandHalfLife.Seconds()
	d.at = now
	d.perSecond[now.Unix()]++
}

// evictDemandLocked forgets the class asked for least recently, if none
// of its sandboxes is ready.
func (p *Pool) evictDemandLocked() bool {
	var oldest *poolClass
	for c, d := range p.demand {
		if len(p.ready[c]) == 0 && (p.def == nil || c != *p.def) && (oldest == nil || d.at.Before(p.demand[*oldest].at)) {
			oldest = &c
		}
	}
	if oldest == nil {
		return false
	}
	delete(p.demand, *oldest)
	return true
}

func (d *classDemand) rateAt(now time.Time) float64 {
	if d.at.IsZero() {
		return 0
	}
	return d.rate * math.Exp(-now.Sub(d.at).Seconds()*math.Ln2/demandHalfLife.Seconds())
}

// peak is the most claims in any one second of the last peakWindow.
func (d *classDemand) peak(now time.Time) int {
	m := 0
	for s, n := range d.perSecond {
		if now.Unix()-s > int64(peakWindow.Seconds()) {
			delete(d.perSecond, s)
			continue
		}
		m = max(m, n)
	}
	return m
}

// targetsLocked returns how many sandboxes of each class the pool keeps:
// per class max(min, ceil(2·rate·R), peak), where R is the p95 time to
// make one and min is max(1, MinReady) for the default class and 0 for
// others; a class
// nobody asked for in peakWindow gets none. Within the budget of
// floor(budget/cost) sandboxes (those being destroyed count), classes
// are served by rate, the default class first.
func (p *Pool) targetsLocked(now time.Time) map[poolClass]int {
	r := p.makeP95().Seconds()
	type want struct {
		c    poolClass
		n    int
		rate float64
	}
	var wants []want
	for c, d := range p.demand {
		n := max(int(math.Ceil(2*d.rateAt(now)*r)), d.peak(now))
		if now.Sub(d.at) > peakWindow {
			n = 0
		}
		wants = append(wants, want{c, n, d.rateAt(now)})
	}
	if p.def != nil {
		floor := max(1, p.cfg.MinReady)
		if i := slices.IndexFunc(wants, func(w want) bool { return w.c == *p.def }); i >= 0 {
			wants[i].n, wants[i].rate = max(wants[i].n, floor), math.Inf(1)
		} else {
			wants = append(wants, want{*p.def, floor, math.Inf(1)})
		}
	}
	sort.Slice(wants, func(i, j int) bool { return wants[i].rate > wants[j].rate })
	room := int(float64(p.cfg.MemoryBudget)/p.cost) - p.destroying
	out := map[poolClass]int{}
	for _, w := range wants {
		n := min(w.n, max(room, 0))
		room -= n
		if n > 0 {
			out[w.c] = n
		}
	}
	return out
}

func (p *Pool) makeP95() time.Duration {
	if len(p.makeTimes) == 0 {
		return 300 * time.Millisecond
	}
	s := slices.Clone(p.makeTimes)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*95/100)]
}

// Run keeps the pool at its targets until ctx ends: it makes one sandbox
// at a time (claims and cold creates go first on a 2-vCPU node), and
// destroys sandboxes past MaxAge or past their class's target. It returns
// nil when ctx ends; Close then destroys what is ready.
func (p *Pool) Run(ctx context.Context) error {
	if c, err := p.rt.defaultClass(ctx, p.cfg.DefaultImage); err != nil {
		p.logger.Warn("no default class: the pool makes only what steps ask for", "image", p.cfg.DefaultImage, "error", err)
	} else {
		p.mu.Lock()
		p.def = &c
		p.mu.Unlock()
	}
	for {
		next := p.tend(ctx)
		if next == 0 && ctx.Err() == nil {
			continue
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-p.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// diskBoundRetry is how long the pool waits before it tries again to
// make a sandbox the node's disk refused.
const diskBoundRetry = 10 * time.Second

// Shed destroys one ready sandbox, the oldest of the least wanted class,
// so that what it reserved (its workspace's disk) goes to a step the node
// refused for want of it. It reports whether there was one.
func (p *Pool) Shed(ctx context.Context) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	targets := p.targetsLocked(p.now())
	var victim *poolClass
	for c, q := range p.ready {
		if len(q) > 0 && (victim == nil || targets[c] < targets[*victim]) {
			victim = &c
		}
	}
	if victim == nil {
		p.mu.Unlock()
		return false
	}
	q := p.ready[*victim]
	sb := q[0]
	if p.ready[*victim] = q[1:]; len(p.ready[*victim]) == 0 {
		delete(p.ready, *victim)
	}
	p.destroying++
	p.diskBoundUntil = p.now().Add(diskBoundRetry) // the step has the disk first
	p.gaugesLocked()
	p.mu.Unlock()
	p.logger.Info("a step needs the disk a pooled sandbox reserved; destroying the sandbox", "sandbox", sb.id)
	p.metrics.pool.discarded.WithLabelValues("disk").Inc()
	p.destroy(ctx, sb)
	return true
}

// quietAfterTake is how long the pool makes nothing after a step asked it
// for a sandbox: on a 2-vCPU node the claimed step's exec, or the cold
// create of a miss, goes first.
const quietAfterTake = 250 * time.Millisecond

// tend does one round of Run: it destroys what is too old or not wanted,
// then makes one sandbox if a class is short. It returns when to tend
// again: at once after it made one (another may be due), after the quiet
// time of a recent Take, else in a second.
func (p *Pool) tend(ctx context.Context) time.Duration {
	now := p.now()
	if now.Sub(p.checked) >= checkEvery {
		p.checked = now
		p.checkReady(ctx)
	}
	p.mu.Lock()
	targets := p.targetsLocked(now)
	var drop []*Sandbox
	var reasons []string
	for c, q := range p.ready {
		keep := q[:0]
		for _, sb := range q {
			switch {
			case now.Sub(sb.madeAt) > p.cfg.MaxAge:
				drop, reasons = append(drop, sb), append(reasons, "max_age")
			case len(keep) >= targets[c]:
				drop, reasons = append(drop, sb), append(reasons, "unwanted")
			default:
				keep = append(keep, sb)
			}
		}
		if len(keep) == 0 {
			delete(p.ready, c)
		} else {
			p.ready[c] = keep
		}
	}
	p.destroying += len(drop)
	var short *poolClass
	for c, n := range targets {
		if len(p.ready[c]) < n && (short == nil || p.def != nil && c == *p.def) {
			short = &c
		}
	}
	var quiet time.Duration
	switch {
	case short != nil && now.Before(p.diskBoundUntil):
		short, quiet = nil, p.diskBoundUntil.Sub(now)
	case short != nil && now.Sub(p.lastTake) < quietAfterTake:
		short, quiet = nil, quietAfterTake-now.Sub(p.lastTake)
	}
	if short != nil {
		p.creating++
	}
	p.gaugesLocked()
	p.mu.Unlock()

	for i, sb := range drop {
		p.metrics.pool.discarded.WithLabelValues(reasons[i]).Inc()
		p.destroy(ctx, sb)
	}
	if quiet > 0 {
		return quiet
	}
	if short == nil || ctx.Err() != nil {
		if short != nil {
			p.mu.Lock()
			p.creating--
			p.mu.Unlock()
		}
		return time.Second
	}
	start := p.now()
	// Not cancelled when Run's context ends: a task create cut short
	// can leave runsc's cgroups behind after the sandbox was destroyed.
	// A sandbox made after that is added, and Close destroys it.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	sb, err := p.rt.makePooled(mctx, *short)
	cancel()
	took := p.now().Sub(start)
	p.mu.Lock()
	p.creating--
	if errors.Is(err, ErrLowDisk) {
		// The node's disk bounds the pool (each sandbox reserves its
		// workspace size): not a failure of the node, which still takes
		// steps. The pool stays at that size until a sandbox leaves.
		first := !p.diskBound
		p.diskBound, p.diskBoundUntil = true, p.now().Add(diskBoundRetry)
		p.gaugesLocked()
		p.mu.Unlock()
		if first {
			p.logger.Info("the warm pool stays at its size: the node's disk takes no more", "class", short.key(), "reason", err)
		}
		return diskBoundRetry
	}
	if err != nil {
		p.failLocked(fmt.Sprintf("make a sandbox of class %s: %v", short.key(), err), false)
		p.gaugesLocked()
		p.mu.Unlock()
		if ctx.Err() == nil {
			p.logger.Warn("make a pooled sandbox", "class", short.key(), "error", err)
		}
		return time.Second
	}
	p.failures, p.failReason, p.diskBound = 0, "", false
	p.makeTimes = append(p.makeTimes, took)
	if len(p.makeTimes) > 20 {
		p.makeTimes = p.makeTimes[1:]
	}
	if m := p.rt.memory(sb); m > 0 {
		p.cost = 0.8*p.cost + 0.2*float64(m)
	}
	closed := p.closed
	if closed {
		p.destroying++
	}
	p.mu.Unlock()
	p.metrics.pool.create.Observe(took.Seconds())
	if closed {
		p.destroy(ctx, sb)
		return time.Second
	}
	p.add(sb)
	return 0
}

// checkReady checks every ready sandbox from the host (Runtime.check) and
// destroys those that fail, counting each as a failure of the pool.
func (p *Pool) checkReady(ctx context.Context) {
	p.mu.Lock()
	var all []*Sandbox
	for _, q := range p.ready {
		all = append(all, q...)
	}
	p.mu.Unlock()
	for _, sb := range all {
		err := p.rt.check(ctx, sb)
		if err == nil || ctx.Err() != nil {
			continue
		}
		p.mu.Lock()
		q := p.ready[*sb.class]
		i := slices.Index(q, sb)
		if i < 0 { // claimed meanwhile: its step's now
			p.mu.Unlock()
			continue
		}
		p.ready[*sb.class] = slices.Delete(q, i, i+1)
		if len(p.ready[*sb.class]) == 0 {
			delete(p.ready, *sb.class)
		}
		p.destroying++
		p.failLocked(fmt.Sprintf("pooled sandbox %s: %v", sb.id, err), false)
		p.mu.Unlock()
		p.logger.Warn("a pooled sandbox failed its check; destroying it", "sandbox", sb.id, "error", err)
		p.metrics.pool.discarded.WithLabelValues("unhealthy").Inc()
		p.destroy(ctx, sb)
	}
}

// destroy destroys a sandbox that left the pool unclaimed, counted in
// destroying until it is gone.
func (p *Pool) destroy(ctx context.Context, sb *Sandbox) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.rt.destroy(dctx, sb); err != nil {
		p.logger.Warn("destroy a pooled sandbox", "sandbox", sb.id, "error", err)
	}
	p.mu.Lock()
	p.destroying--
	p.gaugesLocked()
	p.mu.Unlock()
}

// failLocked counts a failed make or claim; limits says a claim's limits
// did not read back, which makes the node degraded at once.
func (p *Pool) failLocked(reason string, limits bool) {
	p.failures++
	p.failReason = reason
	p.limitsFailed = p.limitsFailed || limits
}

// succeeded clears the failures after a claim that worked.
func (p *Pool) succeeded() {
	p.mu.Lock()
	p.failures, p.failReason, p.limitsFailed = 0, "", false
	p.mu.Unlock()
}

// Health returns the reasons the pool makes the node degraded: three
// failed makes or claims in a row, or a claim whose limits did not read
// back; none once one succeeds.
func (p *Pool) Health() []string {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures >= poolFailLimit || p.limitsFailed {
		return []string{"warm pool: " + p.failReason}
	}
	return nil
}

// Status is the pool's state for the node's heartbeat; nil for no pool.
func (p *Pool) Status() *cluster.PoolStatus {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.readyLocked()
	return &cluster.PoolStatus{
		Ready: n, Creating: p.creating, Classes: len(p.targetsLocked(p.now())),
		MemoryBytes: int64(float64(n+p.creating+p.destroying) * p.cost),
		BudgetBytes: p.cfg.MemoryBudget,
	}
}

func (p *Pool) readyLocked() int {
	n := 0
	for _, q := range p.ready {
		n += len(q)
	}
	return n
}

func (p *Pool) gaugesLocked() {
	m := p.metrics.pool
	n := p.readyLocked()
	m.sandboxes.WithLabelValues("ready").Set(float64(n))
	m.sandboxes.WithLabelValues("creating").Set(float64(p.creating))
	m.sandboxes.WithLabelValues("destroying").Set(float64(p.destroying))
	m.memory.Set(float64(n+p.creating+p.destroying) * p.cost)
	m.target.Reset()
	for c, t := range p.targetsLocked(p.now()) {
		m.target.WithLabelValues(c.key()).Set(float64(t))
	}
}

// Close destroys the pool's ready sandboxes; call it once Run returned,
// with a fresh bounded context. Take misses from then on.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	var all []*Sandbox
	for _, q := range p.ready {
		all = append(all, q...)
	}
	clear(p.ready)
	p.destroying += len(all)
	p.mu.Unlock()
	var errs []error
	for _, sb := range all {
		if err := p.rt.destroy(ctx, sb); err != nil {
			errs = append(errs, fmt.Errorf("destroy pooled sandbox %s: %w", sb.id, err))
		}
		p.mu.Lock()
		p.destroying--
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.gaugesLocked()
	p.mu.Unlock()
	return errors.Join(errs...)
}
