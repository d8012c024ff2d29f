package benchfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
)

func TestOptionsNameTheNode(t *testing.T) {
	o := Options{Prefix: "workspace"}
	tlsMode := benchtls.Mode{Dir: "/d"}
	want := fmt.Sprintf("workspace-%d-tls", os.Getpid())
	if got := o.NodeID(tlsMode); got != want {
		t.Errorf("NodeID(tls) = %q, want %q", got, want)
	}
	ids := o.Identities(tlsMode)
	if got := ids[1]; got != (pki.Identity{Role: pki.RoleAgent, Name: want}) {
		t.Errorf("Identities(tls)[1] = %v, want agent/%s", got, want)
	}
}

// TestSendStreamsWithLength checks that Send carries the key, sends a
// sized body with its Content-Length and returns a non-2xx answer as it
// is.
func TestSendStreamsWithLength(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusConflict)
		}
		fmt.Fprintf(w, "%s %d %v %s %s", r.Header.Get("Authorization"), r.ContentLength, r.TransferEncoding, r.Header.Get("If-Match"), b)
	}))
	defer srv.Close()
	c := NewClient(srv.URL, nil)
	c.bearer = "k"
	for _, tc := range []struct {
		method string
		body   io.Reader
		want   string
		status int
	}{
		{http.MethodPut, io.NewSectionReader(strings.NewReader("hello"), 0, 5), "Bearer k 5 [] rev-1 hello", http.StatusOK},
		{http.MethodPut, io.MultiReader(strings.NewReader("hello")), "Bearer k -1 [chunked] rev-1 hello", http.StatusOK},
		{http.MethodDelete, nil, "Bearer k 0 [] rev-1 ", http.StatusConflict},
	} {
		resp, err := c.Send(context.Background(), tc.method, "/x", tc.body, http.Header{"If-Match": {"rev-1"}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != tc.want || resp.StatusCode != tc.status {
			t.Errorf("Send(%s) answered %d %q, want %d %q", tc.method, resp.StatusCode, b, tc.status, tc.want)
		}
	}
}

func TestFinishWritesTheReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.md")
	for _, tc := range []struct {
		out    string
		err    error
		status int
	}{
		{out, nil, 0},
		{out, errors.New("slow"), 1},
		{filepath.Join(out, "not-a-dir", "r.md"), nil, 1},
	} {
		os.Remove(out)
		if got := Finish("bench", tc.out, "# report\n", tc.err); got != tc.status {
			t.Errorf("Finish(%s, %v) = %d, want %d", tc.out, tc.err, got, tc.status)
		}
		if b, err := os.ReadFile(tc.out); tc.out == out && string(b) != "# report\n" {
			t.Errorf("Finish wrote %q (%v), want the report", b, err)
		}
	}
}
