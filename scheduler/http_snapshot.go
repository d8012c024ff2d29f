package scheduler

import (
	"net/http"

	"github.com/rodon-compute/rodon/cluster"
)

// handleSnapshot answers GET /v1/snapshot: the replicated state as one
// JSON document (environment values stay sealed).
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) error {
	d := s.fsm.document()
	w.Header().Set("Content-Disposition", `attachment; filename="rodon-scheduler-snapshot.json"`)
	writeIndexed(w, http.StatusOK, d.Index, d)
	return nil
}

// decodeSnapshotDocument decodes and checks the body of POST
// /v1/snapshot/restore.
func decodeSnapshotDocument(w http.ResponseWriter, r *http.Request) (snapshotData, error) {
	var d snapshotData
	if err := decodeBody(w, r, &d, maxSnapshot, false); err != nil {
		return d, err
	}
	if d.Version != snapshotVersion {
		return d, badRequest("field \"version\": %d: this scheduler reads snapshot documents of version %d", d.Version, snapshotVersion)
	}
	for i, n := range d.Nodes {
		if n == nil {
			return d, badRequest("field \"nodes[%d]\": null", i)
		}
	}
	for i, s := range d.Steps {
		if s == nil {
			return d, badRequest("field \"steps[%d]\": null", i)
		}
		if s.Spec.WorkspaceAccess != nil || s.Spec.LibraryAccess != nil {
			return d, badRequest("field \"steps[%d].spec.workspace_access\": workspace URLs are made for assignments and never replicated", i)
		}
		if plaintextTicket(s.Spec) {
			return d, badRequest("field \"steps[%d].spec.secrets.ticket\": secrets tickets are never replicated in the clear: "+
				"restore a document of GET /v1/snapshot, whose tickets are sealed (spec.secrets.sealed_ticket)", i)
		}
		if len(s.Spec.Env) > 0 || s.Spec.EnvError != "" {
			return d, badRequest("field \"steps[%d].spec.env\": plaintext environment values are never replicated: "+
				"restore a document of GET /v1/snapshot, whose values are sealed (spec.sealed_env)", i)
		}
	}
	return d, nil
}

// handleRestore replaces the nodes and steps with those of a snapshot
// document. The document's member records, records, workspaces and audit
// entries are not restored: the record store, the workspaces and the
// audit log stay as they are, since bringing back old records would
// revive revoked keys and sessions and move record versions and workspace
// heads back (breaking compare-and-set), and the audit log is never
// rewritten.
func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) error {
	d, err := decodeSnapshotDocument(w, r)
	if err != nil {
		return err
	}
	c := cluster.Restore{Nodes: make([]cluster.Node, len(d.Nodes)), Steps: make([]cluster.Step, len(d.Steps)), At: s.now()}
	for i, n := range d.Nodes {
		c.Nodes[i] = *n
	}
	for i, st := range d.Steps {
		c.Steps[i] = *st
	}
	if _, err := s.raft.Apply(r.Context(), c); err != nil {
		return err
	}
	s.logger.Warn("state restored from a snapshot document", "nodes", len(c.Nodes), "steps", len(c.Steps))
	writeIndexed(w, http.StatusOK, s.fsm.State().Index(), struct {
		Nodes int `json:"nodes"`
		Steps int `json:"steps"`
	}{len(c.Nodes), len(c.Steps)})
	return nil
}
