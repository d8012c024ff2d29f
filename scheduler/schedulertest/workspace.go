package schedulertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// ExitWithFiles reports the end of step id's process with code, having
// changed its workspace by files (path -> content; "" removes the path)
// from the tree it started from, the way a node does: it reads the base
// tree through the assignment's URLs, asks POST /v1/agent/uploads for PUT
// URLs, uploads what the store lacks (the manifest included) and reports
// the exit with the result. The scheduler commits the revision: the step
// returned has it (Revision; a detached one when it conflicted, the step
// failed).
func (a *Agent) ExitWithFiles(id string, code int, files map[string]string) cluster.Step {
	a.t.Helper()
	return a.ExitWithTree(id, code, files, nil)
}

// ExitWithTree is ExitWithFiles that also leaves symlinks: links maps a
// path to the link's target ("" removes the path). Nothing is checked on
// this side: the scheduler checks the tree as it checks a node's, and a
// tree it refuses (a link out of it) makes no revision: the step exits
// with a workspace_not_saved warning.
func (a *Agent) ExitWithTree(id string, code int, files, links map[string]string) cluster.Step {
	a.t.Helper()
	st := a.Assigned(id)
	acc := st.Spec.WorkspaceAccess
	if acc == nil {
		a.t.Fatalf("schedulertest: step %s has no workspace", id)
	}
	hc := &http.Client{Transport: a.c.Transport(a.as), Timeout: 10 * time.Second}
	byPath := map[string]manifest.Entry{}
	if acc.Manifest != "" {
		b := a.fetch(hc, "GET", acc.URLs[acc.Manifest], nil)
		base, err := manifest.Decode(bytes.NewReader(b), manifest.MaxEncodedBytes, manifest.DefaultLimits)
		if err != nil {
			a.t.Fatalf("schedulertest: step %s's base tree: %v", id, err)
		}
		for _, e := range base.Entries {
			byPath[e.Path] = e
		}
	}
	blobs := map[string][]byte{}
	for p, content := range files {
		if content == "" {
			delete(byPath, p)
			continue
		}
		s := sha256.Sum256([]byte(content))
		d := hex.EncodeToString(s[:])
		blobs[d] = []byte(content)
		byPath[p] = manifest.Entry{Path: p, Type: manifest.File, Mode: 0o644, Size: int64(len(content)), SHA256: d}
	}
	for p, target := range links {
		if target == "" {
			delete(byPath, p)
			continue
		}
		byPath[p] = manifest.Entry{Path: p, Type: manifest.Symlink, Mode: 0o777, Target: target}
	}
	m := &manifest.Manifest{}
	for _, e := range byPath {
		m.Entries = append(m.Entries, e)
	}
	m.Sort()
	enc, digest := manifest.Encode(m)
	blobs[digest] = enc
	req := cluster.UploadsRequest{Step: st.ID, Node: a.ID, Attempt: st.Attempts}
	for d, b := range blobs {
		req.Blobs = append(req.Blobs, cluster.BlobSize{SHA256: d, Size: int64(len(b))})
	}
	body, _ := json.Marshal(req)
	var up cluster.UploadsResponse
	if err := json.Unmarshal(a.fetch(hc, "POST", a.c.Leader().URL()+"/v1/agent/uploads", body), &up); err != nil {
		a.t.Fatalf("schedulertest: uploads of step %s: %v", id, err)
	}
	for d, u := range up.URLs {
		a.fetch(hc, "PUT", u, blobs[d])
	}
	now := time.Now().UTC()
	a.ExitWith(id, cluster.ExitRecord{State: cluster.StateExited, ExitCode: code, TerminatedBy: cluster.ByExit,
		Phases: cluster.Phases{Exited: now, CleanedUp: now}, Workspace: &cluster.WorkspaceResult{Base: acc.Manifest, Manifest: digest}})
	s, _ := a.c.State().Step(st.ID)
	return s
}

// fetch sends one request and returns the body of a 2xx answer.
func (a *Agent) fetch(hc *http.Client, method, u string, body []byte) []byte {
	a.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, u, bytes.NewReader(body))
	if err != nil {
		a.t.Fatalf("schedulertest: %v", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		a.t.Fatalf("schedulertest: %s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode/100 != 2 {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err != nil {
		a.t.Fatalf("schedulertest: %s %s: %v", method, u, err)
	}
	return b
}
