package testenv

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
)

func TestHoldsFindsEncodedMarkers(t *testing.T) {
	m := "envmarkABCDEF0123456789"
	for _, doc := range []string{
		m, "x" + m + "y",
		base64.StdEncoding.EncodeToString([]byte(m)),
		base64.StdEncoding.EncodeToString([]byte("A=" + m)),
		base64.StdEncoding.EncodeToString([]byte("AB=" + m + "tail")),
	} {
		if !Holds([]byte(doc), m) {
			t.Errorf("Holds(%q) = false", doc)
		}
	}
	if Holds([]byte("envmark nothing here"), m) {
		t.Error("Holds() of an unrelated document = true")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("x"+m), 0o600)
	os.WriteFile(filepath.Join(dir, "b"), []byte("clean"), 0o600)
	if got := FilesHolding(t, dir, m); len(got) != 1 || filepath.Base(got[0]) != "a" {
		t.Errorf("FilesHolding = %v, want only a", got)
	}
}
