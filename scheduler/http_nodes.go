package scheduler

import (
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// nodeView returns the public form of node id, or a 404.
func (s *Server) nodeView(id cluster.NodeID) (api.Node, uint64, error) {
	st := s.fsm.State()
	idx := st.Index()
	n, ok := st.Node(id)
	if !ok {
		return api.Node{}, idx, notFound("node %s: not found", id)
	}
	var steps []cluster.Step
	if n.Drain != nil {
		steps = st.Steps(StepFilter{Node: id})
	}
	return s.withMemory(apiNode(n, st.Usage()[id], steps)), idx, nil
}

func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r, cursorNodes)
	if err != nil {
		return err
	}
	st := s.fsm.State()
	idx := st.Index()
	nodes, used, next, more := st.NodesPage(cluster.NodeID(p.key), p.limit)
	out := make([]api.Node, 0, len(nodes))
	for _, n := range nodes {
		var steps []cluster.Step
		if n.Drain != nil {
			// Only a drain's completion needs them: the node's own.
			steps = st.Steps(StepFilter{Node: n.ID})
		}
		out = append(out, s.withMemory(apiNode(n, used[n.ID], steps)))
	}
	setNext(w, cursorNodes, string(next), more)
	writeIndexed(w, http.StatusOK, idx, out)
	return nil
}

func (s *Server) handleNode(w http.ResponseWriter, r *http.Request) error {
	n, idx, err := s.nodeView(cluster.NodeID(r.PathValue("id")))
	if err != nil {
		return err
	}
	writeIndexed(w, http.StatusOK, idx, n)
	return nil
}

func (s *Server) handleDrain(w http.ResponseWriter, r *http.Request) error {
	id := cluster.NodeID(r.PathValue("id"))
	var req api.DrainRequest
	if err := decodeBody(w, r, &req, maxBody, true); err != nil {
		return err
	}
	if req.Deadline < 0 {
		return badRequest("field \"deadline\": %v is negative: want a duration such as \"10m\", or none to wait for the steps", time.Duration(req.Deadline))
	}
	return s.setNodeState(w, r, id, func(now time.Time) cluster.SetNodeState {
		c := cluster.SetNodeState{Node: id, State: cluster.NodeDraining, At: now}
		if req.Deadline > 0 {
			c.Deadline = now.Add(time.Duration(req.Deadline))
		}
		return c
	})
}

func (s *Server) handleUndrain(w http.ResponseWriter, r *http.Request) error {
	id := cluster.NodeID(r.PathValue("id"))
	var none struct{}
	if err := decodeBody(w, r, &none, maxBody, true); err != nil {
		return err
	}
	return s.setNodeState(w, r, id, func(now time.Time) cluster.SetNodeState {
		return cluster.SetNodeState{Node: id, State: cluster.NodeReady, At: now}
	})
}

func (s *Server) setNodeState(w http.ResponseWriter, r *http.Request, id cluster.NodeID, cmd func(time.Time) cluster.SetNodeState) error {
	if _, ok := s.fsm.State().Node(id); !ok {
		return notFound("node %s: not found", id)
	}
	if _, err := s.raft.Apply(r.Context(), cmd(s.now())); err != nil {
		return err
	}
	n, idx, err := s.nodeView(id)
	if err != nil {
		return err
	}
	writeIndexed(w, http.StatusOK, idx, n)
	return nil
}
