package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/cluster"
)

// TestStateTopics: each change wakes the watchers of its topics and no
// others.
func TestStateTopics(t *testing.T) {
	queued, placed, capacity := topic{kind: topicQueued}, topic{kind: topicPlaced}, topic{kind: topicCapacity}
	nodes, ended := topic{kind: topicNodes}, topic{kind: topicEnded}
	n1, n2 := assignTopic("n1"), assignTopic("n2")
	all := []topic{queued, placed, capacity, nodes, ended, n1, n2}
	names := map[topic]string{queued: "queued", placed: "placed", capacity: "capacity", nodes: "nodes", ended: "ended", n1: "assign(n1)", n2: "assign(n2)"}

	f := newTestFSM(t)
	f.mustApply(t, register("n2", 4, 8*gib))
	for _, tc := range []struct {
		name string
		cmd  cluster.Command
		want []topic
	}{
		{"register a node", register("n1", 4, 8*gib), []topic{nodes}},
		{"submit", submit("s1", true), []topic{queued}},
		{"place", place("s1", "n1"), []topic{placed, n1}},
		{"starting", phase("s1", "n1", 1, cluster.StateStarting), []topic{n1}},
		{"running frees a start slot", phase("s1", "n1", 1, cluster.StateRunning), []topic{capacity, n1}},
		{"an unchanged heartbeat, logged", cluster.Heartbeat{Node: "n1", Health: cluster.Health{State: cluster.NodeReady}, At: at(5)}, []topic{nodes}},
		{"cancel requested", cancel("s1", 6), []topic{n1}},
		{"exit", exit("s1", "n1", 1, cluster.StateCancelled, 143), []topic{capacity, ended, n1}},
		{"submit another", submit("s2", true), []topic{queued}},
		{"place it on n2", place("s2", "n2"), []topic{placed, n2}},
		{"n2 lost: the step is queued again", cluster.MarkNodeLost{Node: "n2", Reason: "test", At: at(7)}, []topic{nodes, queued, capacity, n2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := f.State()
			chans := make(map[topic]<-chan struct{})
			for _, tp := range all {
				chans[tp] = st.watch(tp)
			}
			f.mustApply(t, tc.cmd)
			var got []string
			for _, tp := range all {
				select {
				case <-chans[tp]:
					got = append(got, names[tp])
				default:
				}
			}
			var want []string
			for _, tp := range all {
				for _, w := range tc.want {
					if w == tp {
						want = append(want, names[tp])
					}
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("topics woken by %s (-want +got):\n%s", tc.name, diff)
			}
		})
	}

	// A restore wakes every watcher.
	st := f.State()
	var chans []<-chan struct{}
	for _, tp := range all {
		chans = append(chans, st.watch(tp))
	}
	f.mustApply(t, cluster.Restore{At: at(9)})
	for i, ch := range chans {
		select {
		case <-ch:
		default:
			t.Errorf("Restore did not wake the watchers of %s", names[all[i]])
		}
	}
}

// TestAssignmentChanges: an answer as changes holds only the live steps
// changed after the base index, and every live attempt; a base that
// cannot serve (zero, ahead of the state, before a restore) gets every
// live step.
func TestAssignmentChanges(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 4, 8*gib), register("n2", 4, 8*gib),
		submit("s1", false), submit("s2", false), submit("s3", false), place("s1", "n1"), place("s2", "n1"), place("s3", "n2"))
	st := f.State()
	ids := func(steps []cluster.Step) []cluster.StepID {
		out := []cluster.StepID{}
		for _, s := range steps {
			out = append(out, s.ID)
		}
		return out
	}

	idx, steps, live, changes := st.AssignmentChanges("n1", 0)
	if idx != f.idx || changes || live != nil || !cmp.Equal(ids(steps), []cluster.StepID{"s1", "s2"}) {
		t.Errorf("AssignmentChanges(n1, 0) = %d, %v, %v, %v; want %d, [s1 s2], no live list, not changes", idx, ids(steps), live, changes, f.idx)
	}
	base := idx

	f.mustApply(t, phase("s2", "n1", 1, cluster.StateRunning), submit("s4", false), place("s4", "n1"),
		phase("s3", "n2", 1, cluster.StateRunning), exit("s1", "n1", 1, cluster.StateExited, 0))
	idx, steps, live, changes = st.AssignmentChanges("n1", base)
	wantLive := []cluster.StepAttempt{{Step: "s2", Attempt: 1}, {Step: "s4", Attempt: 1}}
	if idx != f.idx || !changes || !cmp.Equal(ids(steps), []cluster.StepID{"s2", "s4"}) || !cmp.Equal(live, wantLive) {
		t.Errorf("AssignmentChanges(n1, %d) = %d, %v, %v, %v; want %d, [s2 s4], %v, changes", base, idx, ids(steps), live, changes, f.idx, wantLive)
	}
	if steps[0].State != cluster.StateRunning || steps[1].State != cluster.StatePlaced {
		t.Errorf("AssignmentChanges(n1, %d) steps = %s, %s; want running, placed", base, steps[0].State, steps[1].State)
	}
	if _, steps, live, changes = st.AssignmentChanges("n1", f.idx); !changes || len(steps) != 0 || len(live) != 2 {
		t.Errorf("AssignmentChanges(n1, now) = %v, %v, %v; want no steps, 2 live, changes", ids(steps), live, changes)
	}

	// A base ahead of this state (an answer of a member further on).
	if _, steps, live, changes = st.AssignmentChanges("n1", f.idx+5); changes || live != nil || len(steps) != 2 {
		t.Errorf("AssignmentChanges(n1, ahead) = %v, %v, %v; want every live step, not changes", ids(steps), live, changes)
	}
	// A restore since the base.
	base = f.idx
	doc := f.FSM.document()
	saved := cluster.Restore{At: at(100)}
	for _, n := range doc.Nodes {
		saved.Nodes = append(saved.Nodes, n.Clone())
	}
	for _, s := range doc.Steps {
		saved.Steps = append(saved.Steps, s.Clone())
	}
	f.mustApply(t, saved)
	if _, steps, live, changes = st.AssignmentChanges("n1", base); changes || live != nil || len(steps) != 2 {
		t.Errorf("AssignmentChanges(n1, before a restore) = %v, %v, %v; want every live step, not changes", ids(steps), live, changes)
	}
	if _, _, _, changes = st.AssignmentChanges("n1", f.idx); !changes {
		t.Errorf("AssignmentChanges(n1, the restore's index): not changes, want changes")
	}
}
