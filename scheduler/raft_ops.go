package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
)

// ErrNotLeader matches every *NotLeaderError with errors.Is.
var ErrNotLeader = errors.New("not the leader")

// ErrLeadershipLost means the leader lost its leadership before the entry
// committed: the command may or may not be applied. Read the state (from
// the new leader) before retrying a command that is not idempotent.
var ErrLeadershipLost = errors.New("leadership lost before the entry committed; it may or may not be applied")

// NotLeaderError is returned by a member that is not the leader for a
// write. LeaderAddr, the leader's Raft address, is empty while no leader
// is known (an election is under way): retry shortly.
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "not the leader, and no leader is known: an election may be under way, retry shortly"
	}
	return fmt.Sprintf("not the leader; the leader is %s at %s", e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

func notLeader(ra *raft.Raft) error {
	addr, id := ra.LeaderWithID()
	return &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
}

// raftErr maps hashicorp/raft's errors to this package's.
func raftErr(ra *raft.Raft, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return notLeader(ra)
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrStopped
	}
	return err
}

func (r *Raft) timeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return r.cfg.ApplyTimeout
}

// wait waits for f on behalf of a caller whose ctx may end first. The
// caller holds a count of wg (acquire); the waiting goroutine takes its
// own and ends when f resolves, at the latest when Run shuts Raft down.
func (r *Raft) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		done <- f.Error()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Apply logs cmd and returns the FSM's result once the entry is committed
// and applied on this member, or the FSM's business error (ErrNotFound,
// ErrTerminal, *CapacityError...). It works only on the leader; elsewhere
// it returns a *NotLeaderError naming the leader so the caller can forward.
// If ctx ends first the error is ctx's and the command may still apply.
func (r *Raft) Apply(ctx context.Context, cmd cluster.Command) (any, error) {
	b, err := cluster.Encode(cmd)
	if err != nil {
		return nil, err
	}
	return r.applyEntry(ctx, cmd.CommandType(), b)
}

// applyEntry logs the encoded entry b, of type t, as Apply does.
func (r *Raft) applyEntry(ctx context.Context, t cluster.CommandType, b []byte) (any, error) {
	res, err := r.applyRaw(ctx, t, b)
	if err != nil {
		return nil, err
	}
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

// applyRaw logs the encoded entry b, of type t, and returns the FSM's
// response as it is, a business error included; err is only a failure
// to log the entry.
func (r *Raft) applyRaw(ctx context.Context, t cluster.CommandType, b []byte) (any, error) {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if ra.State() != raft.Leader {
		return nil, notLeader(ra)
	}
	f := ra.Apply(b, r.timeout(ctx))
	if err := r.wait(ctx, f); err != nil {
		return nil, fmt.Errorf("apply %s: %w", t, raftErr(ra, err))
	}
	return f.Response(), nil
}

// applyAsync hands the encoded entry b, of type t, to Raft and returns
// at once; wait then waits for it as applyRaw would. Entries handed over
// by one goroutine are logged in that order. wait must be called, once.
func (r *Raft) applyAsync(ctx context.Context, t cluster.CommandType, b []byte) (wait func(context.Context) (any, error)) {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return func(context.Context) (any, error) { return nil, err }
	}
	if ra.State() != raft.Leader {
		release()
		err := notLeader(ra)
		return func(context.Context) (any, error) { return nil, err }
	}
	f := ra.Apply(b, r.timeout(ctx))
	return func(ctx context.Context) (any, error) {
		defer release()
		if err := r.wait(ctx, f); err != nil {
			return nil, fmt.Errorf("apply %s: %w", t, raftErr(ra, err))
		}
		return f.Response(), nil
	}
}

// notLeaderNow returns the *NotLeaderError of this member as it knows the
// leader now.
func (r *Raft) notLeaderNow() error {
	id, addr := r.Leader()
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// configuration returns the IDs of the members in the latest Raft
// configuration (which Raft answers without a round trip).
func (r *Raft) configuration(ctx context.Context) ([]string, error) {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	f := ra.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftErr(ra, err)
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	return ids, nil
}

// Barrier returns once every entry committed before it is applied to this
// member's FSM; on the leader, reads of State after it are linearizable.
// It fails on a follower with a *NotLeaderError.
func (r *Raft) Barrier(ctx context.Context) error {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	if err := r.wait(ctx, ra.Barrier(r.timeout(ctx))); err != nil {
		return fmt.Errorf("barrier: %w", raftErr(ra, err))
	}
	return nil
}

// VerifyLeader confirms with a quorum that this member still leads; after
// it, the member's commit index bounds every acknowledged write. It fails
// on a follower or a deposed leader.
func (r *Raft) VerifyLeader(ctx context.Context) error {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	if err := r.wait(ctx, ra.VerifyLeader()); err != nil {
		return fmt.Errorf("verify leadership: %w", raftErr(ra, err))
	}
	return nil
}

// IsLeader reports whether this member is the leader now.
func (r *Raft) IsLeader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ra != nil && r.ra.State() == raft.Leader
}

// Leader returns the leader's ID and Raft address as this member knows
// them; empty when no leader is known.
func (r *Raft) Leader() (id, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ra == nil {
		return "", ""
	}
	a, i := r.ra.LeaderWithID()
	return string(i), string(a)
}

// AppliedIndex returns the index of the last entry applied to the FSM.
func (r *Raft) AppliedIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ra == nil {
		return 0
	}
	return r.ra.AppliedIndex()
}

// Member is one server of the Raft configuration.
type Member struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Leader  bool   `json:"leader"`
	Voter   bool   `json:"voter"`
}

// Members returns the cluster's members as this member knows them.
func (r *Raft) Members(ctx context.Context) ([]Member, error) {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	f := ra.GetConfiguration()
	if err := r.wait(ctx, f); err != nil {
		return nil, fmt.Errorf("read configuration: %w", raftErr(ra, err))
	}
	_, leader := ra.LeaderWithID()
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{
			ID:      string(s.ID),
			Address: string(s.Address),
			Leader:  s.ID == leader,
			Voter:   s.Suffrage == raft.Voter,
		})
	}
	return out, nil
}

// AddVoter adds the member id at Raft address addr as a voter, or updates
// its address. Leader only.
func (r *Raft) AddVoter(ctx context.Context, id, addr string) error {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	f := ra.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, r.timeout(ctx))
	if err := r.wait(ctx, f); err != nil {
		return fmt.Errorf("add voter %s at %s: %w", id, addr, raftErr(ra, err))
	}
	return nil
}

// RemoveServer removes the member id from the cluster. Leader only.
func (r *Raft) RemoveServer(ctx context.Context, id string) error {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	f := ra.RemoveServer(raft.ServerID(id), 0, r.timeout(ctx))
	if err := r.wait(ctx, f); err != nil {
		return fmt.Errorf("remove server %s: %w", id, raftErr(ra, err))
	}
	return nil
}

// LeaderCh returns a channel that receives true when this member becomes
// the leader and false when it stops being it. A receiver that falls
// behind sees only the latest change, so read IsLeader after each receive.
// There is one such channel per Run: give it to one receiver. LeaderCh
// waits for Run to start Raft.
func (r *Raft) LeaderCh(ctx context.Context) (<-chan bool, error) {
	ra, release, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return ra.LeaderCh(), nil
}

// CommitIndex returns the latest index this member knows to be committed:
// on a follower, the leader's commit index as of its last message.
func (r *Raft) CommitIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ra == nil {
		return 0
	}
	return r.ra.CommitIndex()
}

// RaftState returns the member's Raft state: Leader, Follower, Candidate
// or Shutdown.
func (r *Raft) RaftState() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ra == nil {
		return raft.Shutdown.String()
	}
	return r.ra.State().String()
}
