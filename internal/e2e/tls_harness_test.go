package e2e

import (
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/pki"
)

// Every daemon of these tests speaks mutual TLS, as in production: one
// cluster CA for the package (TestMain makes it), the env key beside it,
// and a pair per identity, issued the first time a test needs it. Daemons
// get --tls-dir tlsDir and pick their own pair by role and name.
var (
	tlsDir string
	tlsCA  *pki.CA

	issuedMu sync.Mutex
	issued   = map[pki.Identity]bool{}
)

// operatorName is the one operator identity in tlsDir (schedctl picks the
// one operator-*.crt of its directory).
const operatorName = "e2e"

// setupTLS makes the package's CA and env key in dir.
func setupTLS(dir string) error {
	if err := pki.InitCA(dir, 0); err != nil {
		return err
	}
	if err := envseal.Create(filepath.Join(dir, envseal.KeyFile)); err != nil {
		return err
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		return err
	}
	tlsDir, tlsCA = dir, ca
	_, err = ca.IssueFiles(dir, pki.Identity{Role: pki.RoleOperator, Name: operatorName}, pki.IssueOptions{})
	return err
}

// tlsArgs issues role/name's pair in tlsDir if it has none yet and returns
// the flags that give it to a daemon.
func tlsArgs(t testing.TB, role pki.Role, name string) []string {
	t.Helper()
	id, err := pki.NewIdentity(role, name)
	if err != nil {
		t.Fatal(err)
	}
	issuedMu.Lock()
	defer issuedMu.Unlock()
	if !issued[id] {
		if _, err := tlsCA.IssueFiles(tlsDir, id, pki.IssueOptions{}); err != nil {
			t.Fatalf("issue %s: %v", id, err)
		}
		issued[id] = true
	}
	return []string{"--tls-dir", tlsDir}
}

// source loads role/name's pair (issued if needed).
func source(t testing.TB, role pki.Role, name string) *pki.Source {
	t.Helper()
	tlsArgs(t, role, name)
	id := pki.Identity{Role: role, Name: name}
	src, err := pki.Load(pki.DirFiles(tlsDir, id), id, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// clusterHTTP is an HTTP client that presents role/name's certificate and
// accepts any identity of the cluster CA on the other end (members,
// agents); plain http:// URLs (the gateway's loopback listener) work too.
func clusterHTTP(t testing.TB, role pki.Role, name string) *http.Client {
	t.Helper()
	tr := source(t, role, name).Transport(pki.AnyIdentity)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// schedctlEnv is the environment schedctl needs against the fleet.
func (f *fleet) schedctlEnv() []string {
	return []string{"RODON_SCHEDULER=" + f.urls(), "RODON_TLS_DIR=" + tlsDir}
}

// agentName is the identity name of the i-th agent the harness starts.
func agentName(i int) string { return fmt.Sprintf("a%d", i+1) }
