package scheduler

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/rodon-compute/rodon/cluster"
)

// Ordered indexes of the state, so that a page of a list costs the same
// whatever the number of entries (docs/PROTOCOL.md, "Pagination"): a page
// is a seek (O(log n)) and then as many steps as the page holds. They are
// derived from the records and maintained by the applies that change them
// (putStep, putRecord, putNode), so that they never need to be persisted:
// a restore builds them again.

const treeDegree = 16

// stepTree orders steps by submission: CreateIndex, then ID.
type stepTree = btree.BTreeG[*cluster.Step]

func stepLess(a, b *cluster.Step) bool {
	return a.CreateIndex < b.CreateIndex || a.CreateIndex == b.CreateIndex && a.ID < b.ID
}

// endedLess orders terminal steps by the end of their lifecycle, then ID:
// the compaction takes them from the front.
func endedLess(a, b *cluster.Step) bool {
	ea, eb := endedAt(a), endedAt(b)
	return ea.Before(eb) || ea.Equal(eb) && a.ID < b.ID
}

// endedAt is when a terminal step ended: its EndedAt, or, for a record
// made before EndedAt existed, its exit (else its queueing) time.
func endedAt(s *cluster.Step) time.Time {
	switch {
	case !s.EndedAt.IsZero():
		return s.EndedAt
	case !s.Phases.Exited.IsZero():
		return s.Phases.Exited
	}
	return s.Phases.Queued
}

// stepKeys returns the filters whose ordered index s belongs to: of all
// steps (the zero filter), of its state, of its node, of both. The keys
// are the first n of the array (no allocation: it runs on every apply).
func stepKeys(s *cluster.Step) (keys [4]StepFilter, n int) {
	keys[0], keys[1] = StepFilter{}, StepFilter{State: s.State}
	if s.Node == "" {
		return keys, 2
	}
	keys[2], keys[3] = StepFilter{Node: s.Node}, StepFilter{State: s.State, Node: s.Node}
	return keys, 4
}

// orderStep adds (sign 1) or removes (sign -1) s in the ordered indexes.
// The caller holds mu for writing.
func (st *State) orderStep(s *cluster.Step, sign int) {
	keys, n := stepKeys(s)
	for _, k := range keys[:n] {
		if sign > 0 {
			st.orderedTree(k).ReplaceOrInsert(s)
		} else {
			st.unorder(k, s)
		}
	}
	if s.State.Terminal() {
		if sign > 0 {
			st.ended.ReplaceOrInsert(s)
		} else {
			st.ended.Delete(s)
		}
	}
}

// reorderStep puts s in the ordered indexes in place of old (nil for a
// new step), which has the same order key (CreateIndex, ID): the indexes
// of both are replaced in place, one operation instead of a removal and
// an insertion; the others are changed as orderStep would. The caller
// holds mu for writing.
func (st *State) reorderStep(old, s *cluster.Step) {
	if old == nil || old.CreateIndex != s.CreateIndex || old.ID != s.ID {
		if old != nil {
			st.orderStep(old, -1)
		}
		st.orderStep(s, 1)
		return
	}
	oldKeys, on := stepKeys(old)
	newKeys, nn := stepKeys(s)
	for _, k := range oldKeys[:on] {
		if !slices.Contains(newKeys[:nn], k) {
			st.unorder(k, old)
		}
	}
	for _, k := range newKeys[:nn] {
		st.orderedTree(k).ReplaceOrInsert(s)
	}
	// The ended index orders by end time, which may change: as before.
	if old.State.Terminal() {
		st.ended.Delete(old)
	}
	if s.State.Terminal() {
		st.ended.ReplaceOrInsert(s)
	}
}

// unorder removes s from the ordered index k. An index left empty is
// kept for the next step of its key (there are a few per state and node),
// rather than made again. The caller holds mu for writing.
func (st *State) unorder(k StepFilter, s *cluster.Step) {
	if t := st.ordered[k]; t != nil {
		t.Delete(s)
	}
}

// orderedTree returns the ordered index of k, made if there is none.
// The caller holds mu for writing.
func (st *State) orderedTree(k StepFilter) *stepTree {
	t := st.ordered[k]
	if t == nil {
		t = btree.NewG(treeDegree, stepLess)
		st.ordered[k] = t
	}
	return t
}

// removeStep removes s, a terminal step, from the state and its indexes.
// The caller holds mu for writing.
func (st *State) removeStep(s *cluster.Step) {
	st.indexStep(s, -1)
	delete(st.steps, s.ID)
}

// OldestEnded returns when the terminal step that ended first ended;
// false when no step is terminal.
func (st *State) OldestEnded() (time.Time, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	s, ok := st.ended.Min()
	if !ok {
		return time.Time{}, false
	}
	return endedAt(s), true
}

// StepCursor is where a page of steps starts: the first step submitted
// at or after it (CreateIndex, then ID). The zero cursor is the first.
type StepCursor struct {
	CreateIndex uint64
	ID          cluster.StepID
}

// StepsPage returns at most limit steps that match f, oldest submission
// first, from cursor on, and the cursor of the next page; more is false on
// the last page. Its cost does not depend on how many steps there are:
// one seek in the index of f, then the page.
func (st *State) StepsPage(f StepFilter, from StepCursor, limit int) (steps []cluster.Step, next StepCursor, more bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	t := st.ordered[f]
	if t == nil || limit <= 0 {
		return []cluster.Step{}, next, false
	}
	steps = make([]cluster.Step, 0, min(limit, t.Len()))
	t.AscendGreaterOrEqual(&cluster.Step{CreateIndex: from.CreateIndex, ID: from.ID}, func(s *cluster.Step) bool {
		if len(steps) == limit {
			next, more = StepCursor{CreateIndex: s.CreateIndex, ID: s.ID}, true
			return false
		}
		steps = append(steps, s.Clone())
		return true
	})
	return steps, next, more
}

// stepCount returns how many steps match f. The caller holds mu.
func (st *State) stepCount(f StepFilter) int {
	if t := st.ordered[f]; t != nil {
		return t.Len()
	}
	return 0
}

// recordTree orders the records of one kind by ID.
type recordTree = btree.BTreeG[*Record]

func recordLess(a, b *Record) bool { return a.ID < b.ID }

// putRecord stores r (nil deletes kind/id) and keeps the index current.
// The caller holds mu for writing.
func (st *State) putRecord(kind, id string, r *Record) {
	byID, t := st.records[kind], st.recordOrder[kind]
	if r == nil {
		delete(byID, id)
		if t != nil {
			t.Delete(&Record{ID: id})
		}
		if len(byID) == 0 {
			delete(st.records, kind)
			delete(st.recordOrder, kind)
		}
		return
	}
	if byID == nil {
		byID = make(map[string]*Record)
		st.records[kind] = byID
	}
	if t == nil {
		t = btree.NewG(treeDegree, recordLess)
		st.recordOrder[kind] = t
	}
	byID[id] = r
	t.ReplaceOrInsert(r)
}

// RecordsPage returns at most limit records of kind whose id starts with
// prefix, by id, from the first id at or after cursor on, and the cursor
// of the next page (the id it starts at); more is false on the last page.
// Its cost does not depend on how many records there are.
func (st *State) RecordsPage(kind, prefix, cursor string, limit int) (recs []Record, next string, more bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	t := st.recordOrder[kind]
	recs = []Record{}
	if t == nil || limit <= 0 {
		return recs, "", false
	}
	t.AscendGreaterOrEqual(&Record{ID: max(prefix, cursor)}, func(r *Record) bool {
		if !strings.HasPrefix(r.ID, prefix) {
			return false
		}
		if len(recs) == limit {
			next, more = r.ID, true
			return false
		}
		recs = append(recs, r.clone())
		return true
	})
	return recs, next, more
}

// putNode stores n, a node that may be new, and keeps the index of node
// ids current. The caller holds mu for writing.
func (st *State) putNode(n *cluster.Node) {
	if _, ok := st.nodes[n.ID]; !ok {
		st.nodeOrder.ReplaceOrInsert(n.ID)
	}
	st.nodes[n.ID] = n
	st.notify(topic{kind: topicNodes})
}

// NodesPage returns at most limit nodes, by id, from the first id at or
// after cursor on, with the reservations of their live steps, and the
// cursor of the next page; more is false on the last page.
func (st *State) NodesPage(cursor cluster.NodeID, limit int) (nodes []cluster.Node, used map[cluster.NodeID]Usage, next cluster.NodeID, more bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	nodes, used = []cluster.Node{}, make(map[cluster.NodeID]Usage)
	if limit <= 0 {
		return nodes, used, "", false
	}
	st.nodeOrder.AscendGreaterOrEqual(cursor, func(id cluster.NodeID) bool {
		if len(nodes) == limit {
			next, more = id, true
			return false
		}
		nodes = append(nodes, st.nodes[id].Clone())
		if u, ok := st.usage[id]; ok {
			used[id] = u
		}
		return true
	})
	return nodes, used, next, more
}

func newNodeOrder() *btree.BTreeG[cluster.NodeID] {
	return btree.NewG(treeDegree, cmp.Less[cluster.NodeID])
}
