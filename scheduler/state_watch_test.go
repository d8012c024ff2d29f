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
