// Package pkitest makes a throw-away cluster CA and identities for tests.
package pkitest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/pki"
)

// CA is a cluster CA in a test's temporary directory.
type CA struct {
	*pki.CA
	// Dir holds ca.crt, ca.key and every pair Issue wrote.
	Dir string
}

// New makes a CA in a fresh temporary directory.
func New(t testing.TB) *CA {
	t.Helper()
	dir := t.TempDir()
	if err := pki.InitCA(dir, 0); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{CA: ca, Dir: dir}
}

// Identity is pki.NewIdentity that fails the test on a bad name.
func Identity(t testing.TB, role pki.Role, name string) pki.Identity {
	t.Helper()
	id, err := pki.NewIdentity(role, name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Issue writes a pair for id into the CA's directory and returns its
// files.
func (c *CA) Issue(t testing.TB, id pki.Identity, opts pki.IssueOptions) pki.Files {
	t.Helper()
	if _, err := c.IssueFiles(c.Dir, id, opts); err != nil {
		t.Fatal(err)
	}
	return pki.DirFiles(c.Dir, id)
}

// Source issues a pair for role/name and loads it.
func (c *CA) Source(t testing.TB, role pki.Role, name string) *pki.Source {
	t.Helper()
	id := Identity(t, role, name)
	s, err := pki.Load(c.Issue(t, id, pki.IssueOptions{}), id, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Expired issues a pair for role/name that expired an hour ago and
// returns its files (Load refuses it; a peer presenting it is refused).
func (c *CA) Expired(t testing.TB, role pki.Role, name string) pki.Files {
	t.Helper()
	return c.Issue(t, Identity(t, role, name), pki.IssueOptions{ValidFor: time.Hour, Now: time.Now().Add(-2 * time.Hour)})
}
