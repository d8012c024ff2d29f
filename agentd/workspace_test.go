package agentd

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/rodon-compute/rodon/agentd/blobcache"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/internal/treecopy"
)

// newTestAgentCache is an agent with only its blob cache, for the trees'
// tests that need no runtime.
func newTestAgentCache(t *testing.T) *Agent {
	t.Helper()
	c, err := blobcache.New(blobcache.Config{Dir: filepath.Join(t.TempDir(), "blob-cache")}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	return &Agent{cache: c, logger: testenv.Logger(t)}
}

// TestMaterialiseAndResult goes the way of a step's workspace without
// the sandbox: a revision is materialised (links into the cache, modes
// from the manifest in the copy), copied as the sandbox's copy-in does,
// changed as a step would, read back as the sandbox does, and its result
// manifest built: the digests are the contents', the link planted to a
// host file and the pipe are dropped, and the cache is untouched by all
// of it.
func TestMaterialiseAndResult(t *testing.T) {
	store := newTestStore(t)
	a := newTestAgentCache(t)
	baseFiles := map[string]string{"keep.txt": "kept", "mod.txt": "before", "gone.txt": "x", "run.sh*": "#!/bin/sh\n", "same-a": "twin", "d/same-b": "twin", "empty": ""}
	base := store.commit(baseFiles)
	acc := store.access("ws-1", base, false)
	dir := filepath.Join(t.TempDir(), "workspace")
	m, release, err := a.materialise(t.Context(), acc, dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, d := manifest.Encode(m); d != base {
		t.Fatalf("materialised manifest %s, want %s", d, base)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "keep.txt")); err != nil || fi.Sys().(*syscall.Stat_t).Nlink < 2 {
		t.Errorf("keep.txt: %v, %v; want a hard link into the cache", fi, err)
	}
	// The sandbox's copy-in.
	sandbox := t.TempDir()
	if err := treecopy.Copy(dir, sandbox, treecopy.Limits{Perm: modes(m)}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(sandbox, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh in the sandbox: %v, %v; want mode 0755", fi, err)
	}
	// The step.
	for p, c := range map[string]string{"mod.txt": "after", "new/deep.txt": "new", "same-a": "twin changed"} {
		os.MkdirAll(filepath.Dir(filepath.Join(sandbox, p)), 0o755)
		if err := os.WriteFile(filepath.Join(sandbox, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(filepath.Join(sandbox, "gone.txt"))
	os.Mkdir(filepath.Join(sandbox, "emptydir"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(sandbox, "passwd"))
	os.Symlink("../../etc/shadow", filepath.Join(sandbox, "d", "up"))
	os.Symlink("keep.txt", filepath.Join(sandbox, "alias"))
	// A pipe is skipped by the copy itself; one in the read-back tree is
	// dropped (below).
	syscall.Mkfifo(filepath.Join(sandbox, "fifo"), 0o644)
	// The read-back.
	if _, err := treecopy.Replace(sandbox, dir, treecopy.Limits{}); err != nil {
		t.Fatal(err)
	}
	syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644)
	res, drops, rel, err := buildResult(dir, a.cache, manifest.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	want := map[string]manifest.Entry{}
	for p, c := range map[string]string{"keep.txt": "kept", "mod.txt": "after", "run.sh": "#!/bin/sh\n", "same-a": "twin changed", "d/same-b": "twin", "empty": "", "new/deep.txt": "new"} {
		mode := uint32(0o644)
		if p == "run.sh" {
			mode = 0o755
		}
		want[p] = manifest.Entry{Path: p, Type: manifest.File, Mode: mode, Size: int64(len(c)), SHA256: manifest.Digest([]byte(c))}
	}
	want["emptydir"] = manifest.Entry{Path: "emptydir", Type: manifest.Dir, Mode: 0o755}
	want["alias"] = manifest.Entry{Path: "alias", Type: manifest.Symlink, Mode: 0o777, Target: "keep.txt"}
	if len(res.Entries) != len(want) {
		t.Errorf("result has %d entries, want %d: %+v", len(res.Entries), len(want), res.Entries)
	}
	for _, e := range res.Entries {
		if w, ok := want[e.Path]; !ok || w != e {
			t.Errorf("result entry %+v, want %+v", e, w)
		}
	}
	var droppedPaths []string
	for _, d := range drops {
		droppedPaths = append(droppedPaths, d.path)
	}
	slices.Sort(droppedPaths)
	if w := []string{"d/up -> ../../etc/shadow", "passwd -> /etc/passwd", "pipe"}; !slices.Equal(droppedPaths, w) {
		t.Errorf("dropped %q, want %q", droppedPaths, w)
	}
	diff := manifest.Diff(m, res)
	if !slices.Equal(diff.Added, []string{"alias", "emptydir", "new/deep.txt"}) || !slices.Equal(diff.Modified, []string{"mod.txt", "same-a"}) || !slices.Equal(diff.Removed, []string{"gone.txt"}) {
		t.Errorf("diff = %+v", diff)
	}
	// Every file of the result is in the cache, unchanged ones too, and
	// the base's blobs were not written through the links.
	for _, e := range res.Entries {
		if e.Type != manifest.File {
			continue
		}
		b, err := os.ReadFile(a.cache.Path(e.SHA256))
		if err != nil || manifest.Digest(b) != e.SHA256 {
			t.Errorf("%s: cache blob %s: %v", e.Path, e.SHA256, err)
		}
	}
	for p, c := range baseFiles {
		d := manifest.Digest([]byte(c))
		if b, err := os.ReadFile(a.cache.Path(d)); c != "" && (err != nil || string(b) != c) {
			t.Errorf("base blob of %s changed: %q, %v", p, b, err)
		}
	}
	ev := droppedEvent(drops, warning)
	if ev.Warning == nil || ev.Warning.Cause != api.WarningWorkspacePathsDropped || !strings.Contains(ev.Message, "/etc/passwd") ||
		len(ev.Warning.Paths) != len(drops) || ev.Warning.More != 0 {
		t.Errorf("dropped event %+v, want the %d dropped paths in its payload", ev, len(drops))
	}
	many := make([]dropped, api.MaxFilesNamed+3)
	for i := range many {
		many[i] = dropped{path: fmt.Sprintf("x\n%d", i), why: "a control character"}
	}
	ev = droppedEvent(many, warning)
	if len(ev.Warning.Paths) != api.MaxFilesNamed || ev.Warning.More != 3 || strings.Contains(ev.Message, "\n") {
		t.Errorf("dropped event of %d paths: %d named, %d more, message %q; want %d, 3, newlines quoted", len(many), len(ev.Warning.Paths), ev.Warning.More, ev.Message, api.MaxFilesNamed)
	}
}

// TestMaterialiseRefuses: a revision larger than the step's workspace, a
// manifest that does not hash to its digest, and a blob without a URL fail
// with their typed causes; nothing is left pinned or half made.
func TestMaterialiseRefuses(t *testing.T) {
	store := newTestStore(t)
	a := newTestAgentCache(t)
	big := store.commit(map[string]string{"big": strings.Repeat("x", 2048)})
	dir := filepath.Join(t.TempDir(), "w")
	_, _, err := a.materialise(t.Context(), store.access("ws-1", big, false), dir, 1024)
	if !errors.Is(err, ErrWorkspaceTooLarge) {
		t.Errorf("materialise of 2 KiB into 1 KiB = %v, want ErrWorkspaceTooLarge", err)
	}
	if cause, reason := classify(err); cause != api.CauseWorkspaceTooLarge || !strings.Contains(reason, "workspace limit of 1KiB") {
		t.Errorf("classified %q, %q", cause, reason)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("a refused tree was made")
	}
	forged := store.access("ws-1", big, false)
	forged.Manifest = manifest.Digest([]byte("another tree"))
	forged.URLs[forged.Manifest] = forged.URLs[big]
	if _, _, err := a.materialise(t.Context(), forged, dir, 1<<20); !errors.Is(err, blobcache.ErrVerify) {
		t.Errorf("materialise of a manifest under a wrong digest = %v, want ErrVerify", err)
	} else if cause, _ := classify(err); cause != api.CauseWorkspaceUnavailable {
		t.Errorf("cause %q, want %q", cause, api.CauseWorkspaceUnavailable)
	}
	partial := store.access("ws-1", big, false)
	for d := range partial.URLs {
		if d != big {
			delete(partial.URLs, d)
		}
	}
	if _, _, err := a.materialise(t.Context(), partial, dir, 1<<20); err == nil || !strings.Contains(err.Error(), "no URL for blob") {
		t.Errorf("materialise without a blob's URL = %v", err)
	}
	// An empty workspace is an empty directory.
	m, release, err := a.materialise(t.Context(), store.access("ws-2", "", false), dir, 1024)
	if err != nil || len(m.Entries) != 0 {
		t.Fatalf("empty workspace: %v, %+v", err, m)
	}
	release()
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("empty workspace dir: %v, %v", ents, err)
	}
}

type recordTrip struct{ got []string }

func (r *recordTrip) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = append(r.got, req.URL.String())
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestBlobTransport: the scheduler's own blob URLs go over the cluster's
// mutual TLS, an S3 store's presigned URLs with the system's roots.
func TestBlobTransport(t *testing.T) {
	cl, pub := &recordTrip{}, &recordTrip{}
	c := &http.Client{Transport: blobTransport{cluster: cl, public: pub}}
	local := "https://10.0.0.1:7100/v1/blobs/" + manifest.Digest(nil) + "?method=GET&expires=1&size=0&sig=ab"
	s3 := "https://bucket.s3.example.com/v1/blobs/x?X-Amz-Signature=ab"
	for _, u := range []string{local, s3} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if !slices.Equal(cl.got, []string{local}) || !slices.Equal(pub.got, []string{s3}) {
		t.Errorf("cluster transport got %q, public %q", cl.got, pub.got)
	}
}

// TestBlobClientTLS: the agent fetches the scheduler's own blob URLs with
// its certificate from a scheduler member; a URL of another kind is not
// sent with it (and a cluster certificate is no public one).
func TestBlobClientTLS(t *testing.T) {
	ca := pkitest.New(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := pki.PeerIdentity(r.TLS)
		if !ok || id.String() != "agent/n1" {
			http.Error(w, "who are you", http.StatusForbidden)
			return
		}
		w.Write([]byte("blob"))
	}))
	srv.TLS = ca.Source(t, pki.RoleMember, "m1").ServerConfig(pki.AnyIdentity)
	srv.StartTLS()
	defer srv.Close()
	tr := ca.Source(t, pki.RoleAgent, "n1").Transport(pki.AllowRoles(pki.RoleMember))
	defer tr.CloseIdleConnections()
	hc, closeIdle := blobClient(tr)
	defer closeIdle()
	resp, err := hc.Get(srv.URL + "/v1/blobs/" + manifest.Digest(nil) + "?method=GET&sig=ab")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "blob" {
		t.Errorf("scheduler blob URL: %s %q", resp.Status, b)
	}
	if resp, err := hc.Get(srv.URL + "/bucket/key?X-Amz-Signature=ab"); err == nil {
		resp.Body.Close()
		t.Errorf("an S3-style URL to a server of the cluster CA was fetched: %s", resp.Status)
	}
}
