package api

// FilesChanged is what a step (or a run's steps together) changed in the
// workspace, by slash-separated path relative to the workspace;
// directories end in "/". More counts the changed paths the node did not
// name (it names at most 20 per step).
type FilesChanged struct {
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Removed  []string `json:"removed"`
	More     int      `json:"more"`
}
