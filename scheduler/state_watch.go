package scheduler

import (
	"context"

	"github.com/rodon-compute/rodon/cluster"
)

// Topics let a reader wait for the changes it cares about rather than for
// every entry (docs/design/speed.md 4.6): the assignments long poll of a
// node waits for that node's assignments, and each leader loop for the
// changes that can give its next pass something to do. They are
// notifications only, never state: a watcher reads the state again when
// woken, and may be woken for nothing. They are derived in one place
// from the old and new values of a step (stepTopics) or a node (putNode);
// a restore wakes every watcher.

// topicKind is a kind of change of the state.
type topicKind uint8

const (
	// topicQueued: a step became queued (submitted, or queued again).
	topicQueued topicKind = iota + 1
	// topicPlaced: a step's attempt became placed.
	topicPlaced
	// topicCapacity: a live step ended, changed node, or left the
	// placed and starting states (a start slot freed).
	topicCapacity
	// topicNodes: a node's record changed (registered, health, state,
	// drain).
	topicNodes
	// topicEnded: a step became terminal.
	topicEnded
	// topicAssign: the assignments of one node changed (a live step on
	// it added, changed or removed); see State.AssignmentsIndex.
	topicAssign
)

// topic is what a watcher waits for: a kind of change, and for
// topicAssign the node.
type topic struct {
	kind topicKind
	node cluster.NodeID
}

func assignTopic(node cluster.NodeID) topic { return topic{kind: topicAssign, node: node} }

// watch returns a channel closed at the next change of t (or at a
// restore). Call it before reading the state the change would affect, so
// that a change between the read and the wait is not missed.
func (st *State) watch(t topic) <-chan struct{} {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	ch, ok := st.watchers[t]
	if !ok {
		ch = make(chan struct{})
		st.watchers[t] = ch
	}
	return ch
}

// maxWaitTopics is how many topics waitTopics can wait for at once.
const maxWaitTopics = 4

// waitTopics blocks until one of chans (from watch, at most
// maxWaitTopics) is closed or ctx ends, and returns ctx's error in that
// case.
func waitTopics(ctx context.Context, chans []<-chan struct{}) error {
	if len(chans) > maxWaitTopics {
		panic("waitTopics: too many topics")
	}
	var c [maxWaitTopics]<-chan struct{} // nil: never ready
	copy(c[:], chans)
	select {
	case <-c[0]:
	case <-c[1]:
	case <-c[2]:
	case <-c[3]:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// notify wakes the watchers of t. The caller holds mu for writing.
func (st *State) notify(t topic) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if ch, ok := st.watchers[t]; ok {
		close(ch)
		delete(st.watchers, t)
	}
}

// notifyAll wakes every watcher (a restore may have changed anything).
// The caller holds mu for writing.
func (st *State) notifyAll() {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	for t, ch := range st.watchers {
		close(ch)
		delete(st.watchers, t)
	}
}

// stepTopics wakes the watchers of the changes from old (nil for a new
// step) to s. The caller holds mu for writing.
func (st *State) stepTopics(old, s *cluster.Step) {
	wasLive := old != nil && old.Live()
	if wasLive {
		st.notify(assignTopic(old.Node))
	}
	if s.Live() && (!wasLive || s.Node != old.Node) {
		st.notify(assignTopic(s.Node))
	}
	if s.State == cluster.StateQueued && (old == nil || old.State != cluster.StateQueued) {
		st.notify(topic{kind: topicQueued})
	}
	if s.State == cluster.StatePlaced && (old == nil || old.State != cluster.StatePlaced || old.Attempts != s.Attempts) {
		st.notify(topic{kind: topicPlaced})
	}
	if wasLive && (!s.Live() || s.Node != old.Node || startingSlot(old) && !startingSlot(s)) {
		st.notify(topic{kind: topicCapacity})
	}
	if s.State.Terminal() && (old == nil || !old.State.Terminal()) {
		st.notify(topic{kind: topicEnded})
	}
}

// startingSlot reports whether s holds one of its node's start slots
// (Usage.Starting).
func startingSlot(s *cluster.Step) bool {
	return s.State == cluster.StatePlaced || s.State == cluster.StateStarting
}
