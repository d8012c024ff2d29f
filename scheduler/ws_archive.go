package scheduler

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/textdiff"
)

// The reads of the workspace API that stream a revision's bytes or
// compare two: the archive and the diff.

// Bounds of the diff route.
const (
	maxDiffFileBytes = 1 << 20
	maxDiffFiles     = 100
	// maxDiffText caps one file's unified diff.
	maxDiffText = 256 << 10
)

func (s *Server) handleArchive(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	rev, m, err := s.revOf(r, ws, "rev")
	if err != nil {
		return err
	}
	name := ws
	if rev.ID != "" {
		name += "-" + rev.ID
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.tar.gz"`)
	w.Header().Set("X-Rodon-Revision", rev.ID)
	w.WriteHeader(http.StatusOK)
	// Streamed: an error past this point cuts the archive short, which
	// the client sees as a truncated gzip stream.
	if err := s.writeArchive(r.Context(), w, m, rev); err != nil {
		s.logger.Warn("workspace archive cut short", "workspace", ws, "revision", rev.ID, "error", err)
	}
	return nil
}

func (s *Server) writeArchive(ctx context.Context, w io.Writer, m *manifest.Manifest, rev cluster.Revision) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, e := range m.Entries {
		h := &tar.Header{Name: e.Path, Mode: int64(e.Mode), ModTime: rev.CreatedAt, Format: tar.FormatPAX}
		switch e.Type {
		case manifest.Dir:
			h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
		case manifest.Symlink:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
		default:
			h.Typeflag, h.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if e.Type != manifest.File {
			continue
		}
		if err := s.copyBlob(ctx, tw, e); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// copyBlob writes the bytes of file e to w.
func (s *Server) copyBlob(ctx context.Context, w io.Writer, e manifest.Entry) error {
	rc, _, err := s.blobs.Open(ctx, e.SHA256)
	if err != nil {
		return fmt.Errorf("file %q: %w", e.Path, err)
	}
	defer rc.Close()
	if _, err := io.CopyN(w, rc, e.Size); err != nil {
		return fmt.Errorf("file %q: %w", e.Path, err)
	}
	return nil
}

func (s *Server) handleDiff(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	ctx := r.Context()
	_, fromM, err := s.revisionManifest(ctx, ws, q.Get("from"))
	if err != nil {
		return err
	}
	to, toM, err := s.revOf(r, ws, "to")
	if err != nil {
		return err
	}
	out := api.WorkspaceDiff{From: q.Get("from"), To: to.ID, Changes: manifest.Diff(fromM, toM), Text: []api.FileDiff{}}
	for _, l := range [][]string{out.Changes.Added, out.Changes.Modified, out.Changes.Removed} {
		for _, p := range l {
			if len(out.Text) == maxDiffFiles {
				break
			}
			a, _ := fromM.Lookup(p)
			b, _ := toM.Lookup(p)
			d, ok, err := s.fileDiff(ctx, p, a, b)
			if err != nil {
				return err
			}
			if ok {
				out.Text = append(out.Text, d)
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// fileDiff returns the unified diff of one path's file from a to b (a
// zero entry: absent); false when either side is not a text file of at
// most maxDiffFileBytes.
func (s *Server) fileDiff(ctx context.Context, p string, a, b manifest.Entry) (api.FileDiff, bool, error) {
	var texts [2]string
	for i, e := range []manifest.Entry{a, b} {
		switch {
		case e.Type == "":
			continue
		case e.Type != manifest.File || e.Size > maxDiffFileBytes:
			return api.FileDiff{}, false, nil
		}
		var sb strings.Builder
		if err := s.copyBlob(ctx, &sb, e); err != nil {
			return api.FileDiff{}, false, err
		}
		if !textdiff.IsText(sb.String()) {
			return api.FileDiff{}, false, nil
		}
		texts[i] = sb.String()
	}
	d, truncated := textdiff.Unified(p, texts[0], texts[1], maxDiffText)
	return api.FileDiff{Path: p, Diff: d, Truncated: truncated}, true, nil
}
