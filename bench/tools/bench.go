package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchfleet"
)

// Names of the benchmark's files, the same in the workspace and in the
// local directory.
const (
	readName = "read.txt"
	grepDir  = "grep"
	agent    = "bench"
	// grepPattern matches one line of every tenth file.
	grepPattern = `needle-[0-9]+ found`
)

// bench is the benchmark's fleet, its client, the workspace and the local
// directory with the same files, and what it measured.
type bench struct {
	c     config
	f     *benchfleet.Fleet
	gw    *benchfleet.Client
	ws    string
	local string
	// matches is how many lines grepPattern matches.
	matches int

	read, grep []sample
}

func run(ctx context.Context, c config) (report string, err error) {
	o := benchfleet.Options{Prefix: "tools", NoNode: true}
	mode, _, remove, err := benchfleet.Certificates(c.bin, o)
	defer remove()
	if err != nil {
		return "", err
	}
	f, err := benchfleet.Start(ctx, c.bin, mode, o)
	if f == nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(err != nil); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up the fleet: %w", cerr))
		}
	}()
	if err != nil {
		return "", fmt.Errorf("start the fleet: %w", err)
	}
	b := &bench{c: c, f: f, local: filepath.Join(f.Dir, "local")}
	if err := b.setUp(ctx); err != nil {
		return "", err
	}
	start := time.Now()
	if err := b.measure(ctx); err != nil {
		return "", err
	}
	r := b.render(time.Since(start))
	return r.text, r.check(c)
}

// setUp signs in (the owner made with `gateway bootstrap`, then an admin
// API key), makes the workspace with the agent file, read.txt and the
// Grep's files in one revision, and the same files in the local
// directory.
func (b *bench) setUp(ctx context.Context) error {
	var err error
	if b.gw, err = b.f.SignIn(ctx); err != nil {
		return err
	}
	var w struct {
		ID string `json:"id"`
	}
	if err := b.gw.Do(ctx, http.MethodPost, "/v1/workspaces", map[string]string{"name": "bench-tools"}, &w); err != nil {
		return err
	}
	b.ws = w.ID
	files := map[string][]byte{
		"agents/" + agent + ".md": []byte("---\nname: " + agent + "\ndescription: bench/tools\ntools: [Read, Grep]\nnetwork: none\n---\nReads and searches.\n"),
		readName:                  textFile(10<<10, "read", -1),
	}
	for i := range b.c.files {
		needle := -1
		if i%10 == 0 {
			needle = i
			b.matches++
		}
		files[fmt.Sprintf("%s/%02d/f%04d.txt", grepDir, i%32, i)] = textFile(1<<10, fmt.Sprintf("file %d", i), needle)
	}
	for p, content := range files {
		full := filepath.Join(b.local, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, content, 0o644); err != nil {
			return err
		}
	}
	return b.upload(ctx, files)
}

// textFile is about n bytes of numbered lines about what; line 7 holds
// the needle unless needle is negative.
func textFile(n int, what string, needle int) []byte {
	var buf bytes.Buffer
	for i := 1; buf.Len() < n; i++ {
		if i == 7 && needle >= 0 {
			fmt.Fprintf(&buf, "line %d of %s: needle-%d found here\n", i, what, needle)
			continue
		}
		fmt.Fprintf(&buf, "line %d of %s: the quick brown fox jumps over the lazy dog\n", i, what)
	}
	return buf.Bytes()
}

// upload commits files to the workspace as one revision through the
// gateway's uploads route: the blobs to their presigned URLs, then the
// commit.
func (b *bench) upload(ctx context.Context, files map[string][]byte) error {
	req := api.UploadRequest{Message: "bench/tools"}
	blobs := map[string][]byte{}
	for p, content := range files {
		sum := sha256.Sum256(content)
		d := hex.EncodeToString(sum[:])
		blobs[d] = content
		req.Files = append(req.Files, api.UploadFile{Path: p, SHA256: d, Size: int64(len(content))})
	}
	path := "/v1/workspaces/" + b.ws + "/uploads"
	var up api.UploadResponse
	if err := b.gw.Do(ctx, http.MethodPost, path, req, &up); err != nil {
		return err
	}
	for d, u := range up.URLs {
		p, ok := strings.CutPrefix(u, b.f.Site)
		if !ok {
			return fmt.Errorf("upload URL %s is not the gateway's", u)
		}
		resp, err := b.gw.Send(ctx, http.MethodPut, p, bytes.NewReader(blobs[d]), http.Header{"Content-Type": {"application/octet-stream"}})
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("PUT blob %s: %s: %s", d, resp.Status, bytes.TrimSpace(body))
		}
	}
	req.Commit = true
	if err := b.gw.Do(ctx, http.MethodPost, path, req, &up); err != nil {
		return err
	}
	if up.Revision == nil || up.Revision.Files != int64(len(files)) {
		return fmt.Errorf("the upload's commit answered %+v, want a revision of %d files", up.Revision, len(files))
	}
	return nil
}
