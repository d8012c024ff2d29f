package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// The files of the transfer measurements, in bench.dir, and the path of
// the uploaded file in the workspace.
const (
	srcName  = "src.bin"
	copyName = "copy.bin"
	downName = "down.bin"
	bigPath  = "big.bin"
)

// transferSample is one run of one direction: the gateway's time and
// cp's, each with its sync.
type transferSample struct {
	gw, cp time.Duration
}

// writeRandom writes n bytes of (seeded, not secret) random data to file.
func writeRandom(file string, n int64) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	_, err = io.CopyN(w, rand.NewChaCha8([32]byte{'r', 'o', 'd', 'o', 'n'}), n)
	if err == nil {
		err = w.Flush()
	}
	return closeJoin(f, err)
}

// mark writes run i into the file's first 8 bytes, so that each run's
// upload is a blob the store does not have yet.
func mark(file string, i int) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(binary.BigEndian.AppendUint64(nil, uint64(i+1)), 0)
	return closeJoin(f, err)
}

func closeJoin(f *os.File, err error) error {
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// timed syncs the machine (not counted), then times fn and a sync after
// it.
func timed(fn func() error) (time.Duration, error) {
	syscall.Sync()
	start := time.Now()
	if err := fn(); err != nil {
		return 0, err
	}
	syscall.Sync()
	return time.Since(start), nil
}

// cp copies src to dst with cp(1), as a person would, and times it with
// its sync (timed); dst is removed afterwards. --reflink=never: on a file
// system that shares extents (btrfs, XFS) cp would copy no data at all.
func cp(src, dst string) (time.Duration, error) {
	d, err := timed(func() error {
		out, err := exec.Command("cp", "--reflink=never", src, dst).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cp --reflink=never %s %s: %w: %s", src, dst, err, out)
		}
		return nil
	})
	return d, errors.Join(err, os.Remove(dst))
}

// filePath is the files route of path p in workspace ws.
func filePath(ws, p string) string { return "/v1/workspaces/" + ws + "/files/" + p }

// upload PUTs file to path p of workspace ws, streamed, and returns the
// revision made.
func (b *bench) upload(ctx context.Context, ws, p, file string) (api.Revision, error) {
	var rev api.Revision
	f, err := os.Open(file)
	if err != nil {
		return rev, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rev, err
	}
	resp, err := b.gw.Send(ctx, http.MethodPut, filePath(ws, p), io.NewSectionReader(f, 0, fi.Size()),
		http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return rev, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rev, err
	}
	if resp.StatusCode != http.StatusCreated {
		return rev, fmt.Errorf("PUT %s: %s: %s, want 201", filePath(ws, p), resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &rev); err != nil {
		return rev, fmt.Errorf("PUT %s: decode %.200s: %w", filePath(ws, p), body, err)
	}
	return rev, nil
}

// download GETs path p of workspace ws's head into file and returns its
// ETag (the content's sha256, quoted) and the bytes written.
func (b *bench) download(ctx context.Context, ws, p, file string) (etag string, n int64, err error) {
	resp, err := b.gw.Send(ctx, http.MethodGet, filePath(ws, p), nil, nil)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", 0, fmt.Errorf("GET %s: %s: %s, want 200", filePath(ws, p), resp.Status, strings.TrimSpace(string(body)))
	}
	f, err := os.Create(file)
	if err != nil {
		return "", 0, err
	}
	n, err = io.Copy(f, resp.Body)
	return resp.Header.Get("ETag"), n, closeJoin(f, err)
}

// transfers measures uploads and downloads against cp, -runs times after
// a warm-up, which goes first alternating run by run, and checks the
// last download's bytes against the source.
func (b *bench) transfers(ctx context.Context) error {
	src := filepath.Join(b.dir, srcName)
	for i := -1; i < b.c.runs; i++ {
		if err := mark(src, i); err != nil {
			return err
		}
		var up, down transferSample
		var etag string
		var n int64
		upGW := func() (err error) {
			up.gw, err = timed(func() error {
				rev, err := b.upload(ctx, b.ws, bigPath, src)
				if err == nil && rev.Bytes < b.c.size {
					err = fmt.Errorf("revision %s holds %d bytes, want at least %d", rev.ID, rev.Bytes, b.c.size)
				}
				return err
			})
			return err
		}
		upCP := func() (err error) { up.cp, err = cp(src, filepath.Join(b.dir, copyName)); return err }
		downGW := func() (err error) {
			down.gw, err = timed(func() (err error) {
				etag, n, err = b.download(ctx, b.ws, bigPath, filepath.Join(b.dir, downName))
				return err
			})
			return err
		}
		downCP := func() (err error) { down.cp, err = cp(src, filepath.Join(b.dir, copyName)); return err }
		order := []func() error{upGW, upCP, downGW, downCP}
		if i%2 != 0 {
			order = []func() error{upCP, upGW, downCP, downGW}
		}
		for _, fn := range order {
			if err := fn(); err != nil {
				return fmt.Errorf("transfer run %d: %w", i+1, err)
			}
		}
		if n != b.c.size {
			return fmt.Errorf("transfer run %d: downloaded %d bytes, want %d", i+1, n, b.c.size)
		}
		if i == b.c.runs-1 {
			if err := sameBytes(src, filepath.Join(b.dir, downName), etag); err != nil {
				return err
			}
		}
		if err := os.Remove(filepath.Join(b.dir, downName)); err != nil {
			return err
		}
		if i >= 0 {
			b.up, b.down = append(b.up, up), append(b.down, down)
		}
	}
	return nil
}

// sameBytes checks that file a and b hold the same bytes and that etag
// names their digest.
func sameBytes(a, b, etag string) error {
	da, err := digest(a)
	if err != nil {
		return err
	}
	db, err := digest(b)
	if err != nil {
		return err
	}
	if da != db {
		return fmt.Errorf("the downloaded file's sha256 is %s, want %s (the uploaded file's)", db, da)
	}
	if etag != strconv.Quote(da) {
		return fmt.Errorf("the download's ETag is %s, want %q", etag, da)
	}
	return nil
}

func digest(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
