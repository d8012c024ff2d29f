package scheduler

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// Conversions between the public api types and the replicated cluster
// types, at the HTTP edge.

// specFromRequest turns a step request into the spec to replicate, or a
// 400 that names the field at fault.
func specFromRequest(req api.StepRequest) (cluster.StepSpec, error) {
	switch {
	case req.CPU < 0 || math.IsNaN(req.CPU) || math.IsInf(req.CPU, 0):
		return cluster.StepSpec{}, badRequest("field \"cpu\": %v: want a positive number of cores, such as 0.5", req.CPU)
	case req.MemoryBytes < 0:
		return cluster.StepSpec{}, badRequest("field \"memory_bytes\": %d is negative: want a size in bytes of at least %d MiB", req.MemoryBytes, cluster.MinRequest.MemoryBytes>>20)
	case len(req.EnvNames) > 0:
		return cluster.StepSpec{}, badRequest("field \"env_names\": answers name a step's variables there; a request sends them in \"env\" (NAME=VALUE) or \"sealed_env\"")
	}
	lim, err := limitsOf(req)
	if err != nil {
		return cluster.StepSpec{}, err
	}
	spec := cluster.StepSpec{
		Image:          req.Image,
		Args:           req.Args,
		CPU:            req.CPU,
		MemoryBytes:    req.MemoryBytes,
		Pids:           lim.Pids,
		Timeout:        lim.Timeout,
		WorkspaceBytes: lim.WorkspaceBytes,
		OutputBytes:    lim.OutputBytes,
		Workspace:      req.Workspace,
		BaseRevision:   req.BaseRevision,
		Library:        req.Library,
		NoInternet:     req.NoInternet,
		TTY:            req.TTY,
		Idempotent:     req.Idempotent,
		Node:           cluster.NodeID(req.Node),
	}
	spec.WorkspaceReadOnly = req.WorkspaceReadOnly
	sec, err := secretsOf(req)
	if err != nil {
		return cluster.StepSpec{}, err
	}
	spec.Secrets = sec
	if req.Node != "" {
		if err := cluster.ValidateNodeID(cluster.NodeID(req.Node)); err != nil {
			return cluster.StepSpec{}, badRequest("field \"node\": %v", err)
		}
	}
	if err := checkWorkspaceFields(req); err != nil {
		return cluster.StepSpec{}, err
	}
	if err := spec.Validate(); err != nil {
		return cluster.StepSpec{}, badRequest("invalid step: %v", err)
	}
	if req.ID != "" {
		if err := cluster.ValidateStepID(cluster.StepID(req.ID)); err != nil {
			return cluster.StepSpec{}, badRequest("field \"id\": %v", err)
		}
	}
	return spec, nil
}

// checkWorkspaceFields checks the workspace, base revision and library of
// a step request by their grammar; the leader checks the base against the
// workspace's revisions (resolveBase).
func checkWorkspaceFields(req api.StepRequest) error {
	if req.Workspace != "" {
		if err := cluster.ValidateWorkspaceID(req.Workspace); err != nil {
			return badRequest("field \"workspace\": %v", err)
		}
	}
	if req.BaseRevision != "" {
		if req.Workspace == "" {
			return badRequest("field \"base_revision\": %s names a revision of no workspace: set \"workspace\" too", req.BaseRevision)
		}
		if err := cluster.ValidateRevisionID(req.BaseRevision); err != nil {
			return badRequest("field \"base_revision\": %v", err)
		}
	}
	if req.Library != "" {
		if err := cluster.ValidateWorkspaceID(req.Library); err != nil {
			return badRequest("field \"library\": %v", err)
		}
	}
	if req.WorkspaceReadOnly && req.Workspace == "" {
		return badRequest("field \"workspace_read_only\": a step without a workspace has none to mount read-only: set \"workspace\" too, or drop the field")
	}
	return nil
}

// limitsOf returns the limits a step request asks for, each zero one set
// to its default (cluster.DefaultLimits), or a 400 that names the field
// and its bounds when one is outside [cluster.MinLimits,
// cluster.MaxLimits]. Whatever path a step comes by (the gateway, schedctl,
// the API), its record holds the limits in force.
func limitsOf(req api.StepRequest) (cluster.Limits, error) {
	lim := cluster.Limits{
		Pids:           req.Pids,
		Timeout:        time.Duration(req.Timeout),
		WorkspaceBytes: req.WorkspaceBytes,
		OutputBytes:    req.OutputBytes,
	}.WithDefaults()
	var le *cluster.LimitError
	if err := lim.Check(cluster.MaxLimits); errors.As(err, &le) {
		return lim, badRequest("field %q: %s: want %s to %s (zero or absent: the default; see docs/PROTOCOL.md, \"Step limits\")",
			le.Field, le.Value, le.Min, le.Max)
	} else if err != nil {
		return lim, badRequest("step limits: %v", err)
	}
	return lim, nil
}

// limitsOfSpec returns the limits of a step in force: those of its spec,
// where every step submitted since limits exist has all four, and the
// defaults for a zero (a step recorded before).
func limitsOfSpec(spec cluster.StepSpec) cluster.Limits {
	return cluster.Limits{Pids: spec.Pids, Timeout: spec.Timeout, WorkspaceBytes: spec.WorkspaceBytes, OutputBytes: spec.OutputBytes}.WithDefaults()
}

// requestOf is the spec as answers show it: the environment by its names
// only, and the limits in force.
func requestOf(spec cluster.StepSpec) api.StepRequest {
	lim := limitsOfSpec(spec)
	req := api.StepRequest{
		Image:          spec.Image,
		Args:           slices.Clone(spec.Args),
		EnvNames:       spec.EnvNames(),
		CPU:            spec.CPU,
		MemoryBytes:    spec.MemoryBytes,
		Pids:           lim.Pids,
		Timeout:        api.Duration(lim.Timeout),
		WorkspaceBytes: lim.WorkspaceBytes,
		OutputBytes:    lim.OutputBytes,
		Workspace:      spec.Workspace,
		BaseRevision:   spec.BaseRevision,
		Library:        spec.Library,
		NoInternet:     spec.NoInternet,
		TTY:            spec.TTY,
		Idempotent:     spec.Idempotent,
		Node:           string(spec.Node),
	}
	req.WorkspaceReadOnly = spec.WorkspaceReadOnly
	if spec.Secrets != nil {
		// Names and where from; never the ticket.
		req.Secrets = &api.StepSecrets{Names: slices.Clone(spec.Secrets.Names), Gateway: spec.Secrets.Gateway}
	}
	return req
}

// apiStep converts a step record to its public form.
func apiStep(s cluster.Step) api.Step {
	out := api.Step{
		ID:           string(s.ID),
		State:        string(s.State),
		ExitCode:     s.ExitCode,
		TerminatedBy: string(s.TerminatedBy),
		Node:         string(s.Node),
		Attempts:     s.Attempts,
		Idempotent:   s.Spec.Idempotent,
		Phases:       api.Phases(s.Phases),
		Events:       make([]api.Event, 0, len(s.Events)),
		Reason:       s.Reason,
		Cause:        s.Cause,
		Unplaceable:  apiUnplaceable(s.Unplaceable),
		EndedAt:      s.EndedAt,
		Revision:     s.Revision,
		Spec:         requestOf(s.Spec),
		CreateIndex:  s.CreateIndex,
		ModifyIndex:  s.ModifyIndex,
	}
	if s.Cancel != nil {
		out.Cancel = &api.Cancel{RequestedAt: s.Cancel.RequestedAt, ConfirmedAt: s.Cancel.ConfirmedAt, Unverified: s.Cancel.Unverified}
	}
	for _, e := range s.Events {
		out.Events = append(out.Events, api.Event(e))
	}
	return out
}

func apiUnplaceable(u *cluster.Unplaceable) *api.Unplaceable {
	if u == nil {
		return nil
	}
	out := &api.Unplaceable{Node: string(u.Node), Unregistered: u.Unregistered, NoSingleNode: u.NoSingleNode}
	for _, m := range u.Missing {
		out.Missing = append(out.Missing, api.Shortfall(m))
	}
	return out
}

func apiSteps(steps []cluster.Step) []api.Step {
	out := make([]api.Step, 0, len(steps))
	for _, s := range steps {
		out = append(out, apiStep(s))
	}
	return out
}

func apiLimits(l cluster.Limits) api.Limits {
	return api.Limits{Pids: l.Pids, Timeout: api.Duration(l.Timeout), WorkspaceBytes: l.WorkspaceBytes, OutputBytes: l.OutputBytes}
}

// apiNode converts a node record to its public form, given its
// reservations and the steps that ran on it (for the drain's completion).
func apiNode(n cluster.Node, u Usage, steps []cluster.Step) api.Node {
	out := api.Node{
		ID:              string(n.ID),
		State:           string(n.State),
		DegradedReasons: slices.Clone(n.DegradedReasons()),
		Capacity:        api.Resources(n.Capacity),
		Reserved:        api.Resources{CPU: float64(u.MilliCPU) / 1000, MemoryBytes: u.MemoryBytes},
		Running:         u.Live,
		Labels:          n.Labels,
		MaxLimits:       apiLimits(nodeMaxLimits(n.MaxLimits)),
		LastHeartbeat:   n.LastHeartbeat,
		DownSince:       n.DownSince,
		DownReason:      n.DownReason,
	}
	if out.DegradedReasons == nil {
		out.DegradedReasons = []string{}
	}
	if n.Address.IsValid() {
		out.Address = n.Address.String()
	}
	if n.Drain != nil {
		out.Drain = &api.Drain{
			RequestedAt: n.Drain.RequestedAt,
			Deadline:    n.Drain.Deadline,
			Complete:    drainComplete(n, u, steps),
		}
	}
	return out
}

// drainComplete reports whether a draining node is empty: no live step, no
// cancel waiting for its confirmation, and every sandbox of a step that
// ended there since the drain began reported cleaned up.
func drainComplete(n cluster.Node, u Usage, steps []cluster.Step) bool {
	if u.Live > 0 {
		return false
	}
	for _, s := range steps {
		if s.Node != n.ID {
			continue
		}
		if s.Cancel.Pending() {
			return false
		}
		ended := s.Phases.Exited
		if s.State.Terminal() && s.State != cluster.StateLost && !s.Phases.Created.IsZero() &&
			!ended.Before(n.Drain.RequestedAt) && s.Phases.CleanedUp.IsZero() {
			return false
		}
	}
	return true
}
