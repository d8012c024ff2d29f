package cluster

import (
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Workspaces of the store (docs/design/workspaces.md). A step that names
// a workspace (StepSpec.Workspace, a ws-... id) starts from one of its
// revisions (StepSpec.BaseRevision: the scheduler fixes it at submission,
// the head when the submitter named none, "" for an empty workspace) and
// its changes become a new revision authored by the step, committed with
// its exit (ExitReport.Workspace -> Step.Revision). Revision metadata is
// replicated (Revision); contents live in the blob store.

// WorkspaceAccess is what an agent gets, in its assignment only (never in
// the replicated state), to fetch a step's starting revision: the
// manifest's digest and a presigned GET URL for it and for each distinct
// blob it names, all valid until Expires. An empty Manifest is an empty
// workspace.
type WorkspaceAccess struct {
	Workspace string            `json:"workspace"`
	Revision  string            `json:"revision,omitempty"`
	Manifest  string            `json:"manifest,omitempty"`
	URLs      map[string]string `json:"urls,omitempty"` // digest -> GET URL, the manifest's included
	Expires   time.Time         `json:"expires"`
	// ReadOnly is set for the account library (/library).
	ReadOnly bool `json:"read_only,omitempty"`
}

// WorkspaceResult is what an agent reports with a step's exit when the
// step had a workspace: the digest of the tree the step left (its
// manifest, uploaded with every blob it names that the store lacked),
// from the base it started from. Absent when the step left its tree
// unchanged or it could not be read back (a warning event says why).
type WorkspaceResult struct {
	Base     string `json:"base,omitempty"`
	Manifest string `json:"manifest"`
}

// UploadsRequest is POST /v1/agent/uploads: the blobs of a step's result
// the node is about to upload. The answer (UploadsResponse) has a PUT URL
// for each the store lacks: a blob the store has is never moved twice.
type UploadsRequest struct {
	Step    StepID     `json:"step"`
	Node    NodeID     `json:"node"`
	Attempt int        `json:"attempt"`
	Blobs   []BlobSize `json:"blobs"`
}

// BlobSize names one blob.
type BlobSize struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// UploadsResponse answers an UploadsRequest.
type UploadsResponse struct {
	URLs    map[string]string `json:"urls"`
	Expires time.Time         `json:"expires"`
}

// Revision is a workspace revision as replicated: api.Revision, whose
// change lists are capped (api.MaxRevisionPaths).
type Revision = api.Revision

// Workspace is the replicated state of one workspace of the store: its
// head and how many revisions it has.
type Workspace struct {
	ID   string `json:"id"`
	Head string `json:"head,omitempty"`
	// Number is the head's number (0: no revision yet).
	Number      int64  `json:"number"`
	ModifyIndex uint64 `json:"modify_index"`
}

// CommitRevision is the command that adds a revision: it applies only if
// the workspace's head is still ExpectHead (compare-and-set), unless the
// revision is Detached (a conflict kept aside). The leader computes the
// tree (rebasing onto a newer head when no path conflicts) before it
// proposes; a refused compare-and-set makes it compute again.
type CommitRevision struct {
	ExpectHead string   `json:"expect_head"`
	Revision   Revision `json:"revision"`
}

func (CommitRevision) CommandType() CommandType { return CmdCommitRevision }
