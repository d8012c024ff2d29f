package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/manifest"
)

// Local is a Store in a directory: blob D at DIR/D[:2]/D, writes streamed
// into DIR/tmp and renamed into place once their digest and size are
// checked. Its presigned URLs point at Handler, served by the scheduler
// under the base URL given to NewLocal, and are HMAC-signed with the
// store's key (see "Blob URLs (Local)" in docs/design/workspaces.md).
//
// Several stores (processes) may share one directory: every write is a
// rename of a complete, checked file, so a reader sees a whole blob or
// none.
type Local struct {
	dir     string
	key     []byte
	baseURL string
	now     func() time.Time
}

// tmpDir is the directory of writes in progress under a Local's root. It
// cannot clash with a blob's directory, whose name is two hex digits.
const tmpDir = "tmp"

// NewLocal returns the store in dir (made if missing, with dir/tmp)
// signing its URLs with key (at least 32 bytes, see LoadOrCreateKey) for
// baseURL, the scheme and authority (and optional path prefix) under
// which Handler is served, such as "https://10.0.0.1:7400". Writes left in
// dir/tmp by a process that died are removed.
func NewLocal(dir string, key []byte, baseURL string) (*Local, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("local blob store: key of %d bytes, want at least 32", len(key))
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("local blob store: base URL %q: want http(s)://HOST:PORT[/PREFIX]", baseURL)
	}
	if err := os.MkdirAll(filepath.Join(dir, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("local blob store: %w", err)
	}
	l := &Local{dir: dir, key: append([]byte(nil), key...), baseURL: strings.TrimSuffix(baseURL, "/"), now: time.Now}
	if err := l.sweep(); err != nil {
		return nil, fmt.Errorf("local blob store: %w", err)
	}
	return l, nil
}

// sweep removes the writes in dir/tmp left by a process that died: those
// not modified for a minute (a write in progress of another process
// sharing the directory modifies its file as it streams).
func (l *Local) sweep() error {
	ents, err := os.ReadDir(filepath.Join(l.dir, tmpDir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && l.now().Sub(info.ModTime()) > time.Minute {
			os.Remove(filepath.Join(l.dir, tmpDir, e.Name()))
		}
	}
	return nil
}

// Dir is the store's directory.
func (l *Local) Dir() string { return l.dir }

func (l *Local) path(digest string) string {
	return filepath.Join(l.dir, digest[:2], digest)
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, digest string, r io.Reader, size int64) error {
	if err := checkDigest(digest); err != nil {
		return err
	}
	if size < -1 {
		return fmt.Errorf("put blob %s: size %d: want -1 (unknown) or more", digest, size)
	}
	if st, err := os.Stat(l.path(digest)); err == nil {
		if size >= 0 && st.Size() != size {
			return fmt.Errorf("put blob %s: %d bytes, the stored blob has %d: %w", digest, size, st.Size(), ErrDigest)
		}
		return nil
	}
	limit := int64(-1)
	if size >= 0 {
		limit = size + 1 // one byte more shows a body too long without reading all of it
	}
	w, err := l.write(ctx, r, limit)
	if err != nil {
		return fmt.Errorf("put blob %s: %w", digest, err)
	}
	defer w.discard()
	if size >= 0 && w.size != size {
		if w.size > size {
			return fmt.Errorf("put blob %s: more than the %d bytes announced: %w", digest, size, ErrDigest)
		}
		return fmt.Errorf("put blob %s: %d bytes, want %d: %w", digest, w.size, size, ErrDigest)
	}
	if w.digest != digest {
		return fmt.Errorf("put blob %s: the bytes hash to %s: %w", digest, w.digest, ErrDigest)
	}
	if err := w.commit(l.path(digest)); err != nil {
		return fmt.Errorf("put blob %s: %w", digest, err)
	}
	return nil
}

// PutUnknown implements Store; more than max bytes is an ErrTooLarge.
func (l *Local) PutUnknown(ctx context.Context, r io.Reader, max int64) (string, int64, error) {
	if max < 0 {
		return "", 0, fmt.Errorf("put blob: limit %d: want 0 or more", max)
	}
	w, err := l.write(ctx, r, max+1)
	if err != nil {
		return "", 0, fmt.Errorf("put blob: %w", err)
	}
	defer w.discard()
	if w.size > max {
		return "", 0, fmt.Errorf("put blob: more than %d bytes: %w", max, ErrTooLarge)
	}
	if _, err := os.Stat(l.path(w.digest)); err == nil {
		return w.digest, w.size, nil
	}
	if err := w.commit(l.path(w.digest)); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", w.digest, err)
	}
	return w.digest, w.size, nil
}

// tempBlob is a write in dir/tmp: complete, synced and closed, not yet
// in place.
type tempBlob struct {
	name   string
	digest string
	size   int64
}

// write streams at most limit bytes of r (limit -1: all) into a synced
// temp file, hashing and counting them.
func (l *Local) write(ctx context.Context, r io.Reader, limit int64) (*tempBlob, error) {
	f, err := os.CreateTemp(filepath.Join(l.dir, tmpDir), "put-*")
	if err != nil {
		return nil, err
	}
	w := &tempBlob{name: f.Name()}
	h := sha256.New()
	src := io.Reader(ctxReader{ctx, r})
	if limit >= 0 {
		src = io.LimitReader(src, limit)
	}
	w.size, err = io.Copy(io.MultiWriter(f, h), src)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		w.discard()
		return nil, err
	}
	w.digest = hex.EncodeToString(h.Sum(nil))
	return w, nil
}

// commit renames the temp file to path (read-only, its directory made if
// missing and synced). A blob already there is replaced by the same bytes.
func (w *tempBlob) commit(path string) error {
	if err := os.Chmod(w.name, 0o444); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Rename(w.name, path); err != nil {
		return err
	}
	w.name = ""
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// discard removes the temp file unless commit moved it.
func (w *tempBlob) discard() {
	if w.name != "" {
		os.Remove(w.name)
		w.name = ""
	}
}

// ctxReader ends a copy when its context does.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Open implements Store; the ReadSeekCloser is an *os.File.
func (l *Local) Open(ctx context.Context, digest string) (ReadSeekCloser, int64, error) {
	if err := checkDigest(digest); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(l.path(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("open blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open blob %s: %w", digest, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("open blob %s: %w", digest, err)
	}
	return f, st.Size(), nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, digest string) (int64, error) {
	if err := checkDigest(digest); err != nil {
		return 0, err
	}
	st, err := os.Stat(l.path(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("stat blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("stat blob %s: %w", digest, err)
	}
	return st.Size(), nil
}

// Verify implements Store: Local checked the bytes when it wrote them, so
// it only checks presence.
func (l *Local) Verify(ctx context.Context, digest string) error {
	_, err := l.Stat(ctx, digest)
	return err
}

// Close implements Store; Local holds nothing open.
func (l *Local) Close() error { return nil }

// checkDigest refuses a digest that is not 64 lower-case hex digits
// (ErrDigest): no path or key can be made of one.
func checkDigest(d string) error {
	if err := manifest.CheckDigest(d); err != nil {
		return fmt.Errorf("%v: %w", err, ErrDigest)
	}
	return nil
}

// LoadOrCreateKey returns the 32-byte signing key in path, first writing
// 32 random bytes there (mode 0600, its directory made) when the file does
// not exist. Processes racing to create it end with the same key.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKey(path); err != nil {
			return nil, fmt.Errorf("create blob key %s: %w", path, err)
		}
		key, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read blob key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("blob key %s: %d bytes, want 32 (remove it to make a new one, which voids every URL signed so far)", path, len(key))
	}
	return key, nil
}

// createKey writes a new key to a temp file and links it to path, so that
// path holds a whole key or nothing, and a key made meanwhile stays.
func createKey(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".blob-key-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	key := make([]byte, 32)
	rand.Read(key)
	_, err = f.Write(key)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(f.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
