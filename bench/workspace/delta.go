package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// The small file of the delta steps, and what each step runs on it.
const (
	smallPath  = "small.bin"
	smallBytes = 4096
)

// changeSmall is what both delta steps run: small.bin rewritten.
var changeSmall = []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > /workspace/%s", smallBytes, smallPath)}

// stepMoves is what one step moved: the node's bytes and the store's
// requests, the difference of the metrics before and after it.
type stepMoves struct {
	step                string
	revision            string
	fetched, uploaded   int64 // agentd's bytes
	gets, puts          int64 // the scheduler's blob requests
	baseManifest, after int64 // the manifests' bytes, of the base revision and of the step's
	// estimated is set when a manifest's length was not exactly known.
	estimated bool
}

// deltaResult is the delta measurement: step A from a cold cache, step B
// (the run's next step) from A's revision.
type deltaResult struct {
	workspace int64 // bytes of the workspace's files
	a, b      stepMoves
}

// deltaSteps adds small.bin to the workspace of the uploads and runs
// steps A and B on it, each changing small.bin, reading the metrics
// before and after each.
func (b *bench) deltaSteps(ctx context.Context) (deltaResult, error) {
	var r deltaResult
	small := filepath.Join(b.dir, smallPath)
	buf := make([]byte, smallBytes)
	rand.Read(buf)
	if err := os.WriteFile(small, buf, 0o644); err != nil {
		return r, err
	}
	rev, err := b.upload(ctx, b.ws, smallPath, small)
	if err != nil {
		return r, err
	}
	r.workspace = rev.Bytes
	if r.a, err = b.moves(ctx, rev.ID); err != nil {
		return r, fmt.Errorf("step A: %w", err)
	}
	if r.b, err = b.moves(ctx, r.a.revision); err != nil {
		return r, fmt.Errorf("step B: %w", err)
	}
	return r, nil
}

// moves runs changeSmall from revision base and returns what it moved.
func (b *bench) moves(ctx context.Context, base string) (stepMoves, error) {
	var m stepMoves
	before, err := b.counters(ctx)
	if err != nil {
		return m, err
	}
	st, err := b.submit(ctx, api.StepRequest{Image: "base", Args: changeSmall, CPU: 1, MemoryBytes: 512 << 20,
		Workspace: b.ws, BaseRevision: base, WorkspaceBytes: 2*b.c.size + 64<<20})
	if err != nil {
		return m, err
	}
	if st, err = b.wait(ctx, st.ID); err != nil {
		return m, err
	}
	if err := succeeded(st); err != nil {
		return m, err
	}
	if st.Revision == "" {
		return m, fmt.Errorf("step %s changed %s but made no revision", st.ID, smallPath)
	}
	if err := b.cleanedUp(ctx, st.ID); err != nil {
		return m, err
	}
	after, err := b.counters(ctx)
	if err != nil {
		return m, err
	}
	d := after.sub(before)
	m = stepMoves{step: st.ID, revision: st.Revision, fetched: d.get(nodeFetched), uploaded: d.get(nodeUploaded),
		gets: d.get(storeGets), puts: d.get(storePuts)}
	var exactBase, exactAfter bool
	if m.baseManifest, exactBase, err = b.manifestBytes(ctx, base); err != nil {
		return m, err
	}
	if m.after, exactAfter, err = b.manifestBytes(ctx, st.Revision); err != nil {
		return m, err
	}
	m.estimated = !exactBase || !exactAfter
	return m, nil
}

// counters reads the node's and the store's metrics. The scheduler has a
// series of a route only once the route was asked for, so its metrics
// are not required to exist here; deltaResult.check checks that they
// counted step A's moves.
func (b *bench) counters(ctx context.Context) (counters, error) {
	node, err := scrape(ctx, b.f.Agent, b.f.AgentURL+"/metrics", true, nodeMetrics...)
	if err != nil {
		return nil, fmt.Errorf("agentd's metrics: %w", err)
	}
	store, err := scrape(ctx, b.member, b.f.SchedURL+"/metrics", false, storeMetrics...)
	if err != nil {
		return nil, fmt.Errorf("the scheduler's metrics: %w", err)
	}
	for k, v := range store {
		node[k] = v
	}
	return node, nil
}

// manifestBytes is the length of revision rev's manifest: its tree,
// encoded as the store holds it (internal/manifest); exact when the
// encoding's digest is the revision's (the tree route may answer entries
// the manifest leaves implied, directories).
func (b *bench) manifestBytes(ctx context.Context, rev string) (n int64, exact bool, err error) {
	var tree []api.TreeEntry
	if err := b.gw.Do(ctx, http.MethodGet, "/v1/workspaces/"+b.ws+"/tree?"+url.Values{"rev": {rev}}.Encode(), nil, &tree); err != nil {
		return 0, false, err
	}
	var r api.Revision
	if err := b.gw.Do(ctx, http.MethodGet, "/v1/workspaces/"+b.ws+"/revisions/"+rev, nil, &r); err != nil {
		return 0, false, err
	}
	m := &manifest.Manifest{}
	for _, e := range tree {
		m.Entries = append(m.Entries, manifest.Entry{Path: e.Path, Type: manifest.Type(e.Type), Mode: e.Mode, Size: e.Size, SHA256: e.SHA256, Target: e.Target})
	}
	m.Sort()
	enc, digest := manifest.Encode(m)
	return int64(len(enc)), digest == r.Manifest, nil
}

// limit is the most a step may move in one direction (fetched or
// uploaded): the changed file and a manifest.
func (m stepMoves) limit() (fetched, uploaded int64) {
	return smallBytes + m.baseManifest, smallBytes + m.after
}

// check reports whether step B moved more than it should, or the
// scheduler's metrics saw nothing of step A's moves.
func (r deltaResult) check() error {
	f, u := r.b.limit()
	switch {
	case r.a.gets == 0 || r.a.puts == 0:
		return fmt.Errorf("the scheduler counted %d blob GETs and %d PUTs (%s, %s) for step A, which fetched %d and uploaded %d bytes: "+
			"the names in bench/workspace/metrics.go and the scheduler's disagree", r.a.gets, r.a.puts, storeGets, storePuts, r.a.fetched, r.a.uploaded)
	case r.b.fetched > f:
		return fmt.Errorf("step B fetched %d bytes, more than the changed file and the base manifest (%d)", r.b.fetched, f)
	case r.b.uploaded > u:
		return fmt.Errorf("step B uploaded %d bytes, more than the changed file and its manifest (%d)", r.b.uploaded, u)
	case r.b.gets > 2 || r.b.puts > 2:
		return fmt.Errorf("the scheduler served %d blob GETs and %d PUTs for step B, want at most 2 each (the changed file and a manifest)", r.b.gets, r.b.puts)
	}
	return nil
}
