package agentd

import (
	"bytes"
	"encoding/base64"
	"io"
	"strings"
	"testing"
)

// TestMaskOutput: the writer a step's output goes through masks its
// secrets, also split across writes, and is w itself without secrets.
func TestMaskOutput(t *testing.T) {
	var log bytes.Buffer
	if w := maskOutput(nil, &log); w != io.Writer(&log) {
		t.Fatalf("maskOutput(nil, w) = %T, want w itself", w)
	}
	const value = "s3cr3t-value-of-the-step"
	w := maskOutput([]string{value}, &log)
	printed := "token " + value + " b64 " + base64.StdEncoding.EncodeToString([]byte(value)) + "\n"
	for i := 0; i < len(printed); i += 5 {
		if _, err := w.Write([]byte(printed[i:min(i+5, len(printed))])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.(io.Closer).Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := log.String(), "token *** b64 ***\n"; got != want || strings.Contains(got, value) {
		t.Errorf("masked log = %q, want %q", got, want)
	}
}
