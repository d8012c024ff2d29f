package api

import "time"

// Revision is one revision of a workspace (SPEC.md, "Workspaces and
// revisions"): GET /v1/workspaces/{id}/revisions[/{rev}], and the answer
// of every write.
type Revision struct {
	ID        string `json:"id"` // rev-...
	Workspace string `json:"workspace"`
	// Number counts the workspace's revisions from 1; zero for a detached
	// revision (a writer's tree refused as a conflict, kept so that
	// nothing is lost).
	Number    int64     `json:"number"`
	Parent    string    `json:"parent,omitempty"` // the revision it was made from; empty for the first
	Author    Author    `json:"author"`
	CreatedAt time.Time `json:"created_at"`
	Message   string    `json:"message,omitempty"`
	// Changes is what changed from Parent (lists capped at
	// MaxRevisionPaths each, the rest counted in More; the diff route has
	// them all).
	Changes FilesChanged `json:"changes"`
	// Manifest is the digest of the revision's tree (internal/manifest),
	// Files and Bytes its size.
	Manifest string `json:"manifest"`
	Files    int64  `json:"files"`
	Bytes    int64  `json:"bytes"`
	// Detached is set on a revision refused as a conflict: it is not on
	// the history, Conflict names the paths.
	Detached bool     `json:"detached,omitempty"`
	Conflict []string `json:"conflict,omitempty"`
	// Step, Run: the step that made it (author kind "step"), and its run
	// when the gateway drove it.
	Step string `json:"step,omitempty"`
	Run  string `json:"run,omitempty"`
}

// MaxRevisionPaths is how many paths a revision's change lists name.
const MaxRevisionPaths = 100

// Author kinds: a person (account), an API key, or a step.
const (
	AuthorAccount = "account"
	AuthorKey     = "key"
	AuthorStep    = "step"
)

// Author is who made a revision.
type Author struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// TreeEntry is one path of GET /v1/workspaces/{id}/tree.
type TreeEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"` // file, dir, symlink
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Mode   uint32 `json:"mode"`
	Target string `json:"target,omitempty"`
}

// WorkspaceDiff is GET /v1/workspaces/{id}/diff?from=&to=.
type WorkspaceDiff struct {
	From    string       `json:"from"`
	To      string       `json:"to"`
	Changes FilesChanged `json:"changes"`
	// Text holds a unified diff per changed text file (capped; binary and
	// large files are named in Changes only).
	Text []FileDiff `json:"text"`
}

// FileDiff is the unified diff of one text file.
type FileDiff struct {
	Path string `json:"path"`
	Diff string `json:"diff"`
	// Truncated is set when the diff was cut at its cap.
	Truncated bool `json:"truncated,omitempty"`
}

// RestoreRequest is POST /v1/workspaces/{id}/restore.
type RestoreRequest struct {
	Rev     string `json:"rev"`
	Message string `json:"message,omitempty"`
}

// UploadRequest is POST /v1/workspaces/{id}/uploads: the files of one
// revision to be, by digest. The answer names a presigned PUT URL for
// every blob the store does not have; a second request with Commit set,
// once they are uploaded, makes the revision.
type UploadRequest struct {
	Files []UploadFile `json:"files"`
	// Delete names paths the revision removes (files, symlinks, or
	// directories with everything under them), in the same revision.
	Delete  []string `json:"delete,omitempty"`
	Parent  string   `json:"parent,omitempty"`
	Message string   `json:"message,omitempty"`
	Commit  bool     `json:"commit,omitempty"`
}

// UploadFile is one file of an UploadRequest.
type UploadFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode,omitempty"`
}

// UploadResponse answers an UploadRequest.
type UploadResponse struct {
	// URLs maps each missing digest to its PUT URL, valid until Expires.
	URLs     map[string]string `json:"urls"`
	Expires  time.Time         `json:"expires"`
	Revision *Revision         `json:"revision,omitempty"`
}
