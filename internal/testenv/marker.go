package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Marker returns a random value that no output holds by chance: a test
// puts it where a secret goes and then looks for it everywhere else.
func Marker() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "envmark" + hex.EncodeToString(b)
}

// Holds reports whether b holds marker as it is, or base64-encoded at any
// alignment (as JSON writes a []byte).
func Holds(b []byte, marker string) bool {
	if bytes.Contains(b, []byte(marker)) {
		return true
	}
	for k := range 3 {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, k), marker...))
		// The characters made of the marker's bits alone.
		from, to := (8*k+5)/6, (8*(k+len(marker))-6)/6+1
		if bytes.Contains(b, []byte(enc[from:to])) {
			return true
		}
	}
	return false
}

// FilesHolding returns the regular files under root (or root itself) that
// hold marker (Holds). Files that vanish while it reads (other tests share
// containerd) are skipped; fifos and sockets are never opened.
func FilesHolding(t testing.TB, root, marker string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fh, err := os.Open(path)
		if err != nil {
			return nil
		}
		b, err := io.ReadAll(fh)
		fh.Close()
		if err == nil && Holds(b, marker) {
			out = append(out, path)
		}
		return nil
	})
	return out
}
