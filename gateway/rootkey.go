package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"sync"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/secretbox"
)

// DefaultRootKeyFile is where `gateway serve` looks for the root key when
// --root-key-file is not given: outside the data dir, which backups copy
// (docs/design/tenants.md, "Secrets").
const DefaultRootKeyFile = "/etc/rodon/root-key.json"

// rootKey is the root key file (Config.RootKeyFile), read when first
// needed and again whenever the file changed (another inode, size or
// modification time), so that `gateway keys rotate-root` needs no
// restart. It is safe for concurrent use.
type rootKey struct {
	path string
	// mu guards fi and root: the file as last read and its keyset.
	mu   sync.Mutex
	fi   fs.FileInfo
	root *secretbox.Root
}

// get returns the root keyset, reading the file again if it changed. A
// missing, unreadable, too open or malformed file is a 503 naming it:
// secrets are unavailable, everything else works.
func (rk *rootKey) get() (*secretbox.Root, error) {
	if rk.path == "" {
		return nil, secretsUnavailable("this gateway has no root key file (--root-key-file)")
	}
	fi, err := os.Stat(rk.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, secretsUnavailable(fmt.Sprintf("root key file %s does not exist: make it with `gateway keys init-root --root-key-file %s` "+
			"(or copy the cluster's), outside any backed-up data dir", rk.path, rk.path))
	}
	if err != nil {
		return nil, secretsUnavailable(fmt.Sprintf("root key file %s: %v", rk.path, err))
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, secretsUnavailable(fmt.Sprintf("root key file %s is readable by others (mode %v): chmod 600 it", rk.path, fi.Mode().Perm()))
	}
	rk.mu.Lock()
	defer rk.mu.Unlock()
	if rk.root != nil && os.SameFile(rk.fi, fi) && rk.fi.Size() == fi.Size() && rk.fi.ModTime().Equal(fi.ModTime()) {
		return rk.root, nil
	}
	root, err := secretbox.LoadRoot(rk.path)
	if err != nil {
		return nil, secretsUnavailable(err.Error())
	}
	rk.fi, rk.root = fi, root
	return root, nil
}

// secretsUnavailable is the 503 of the secrets routes when the root key
// cannot be had: why, and that the rest of the gateway works.
func secretsUnavailable(why string) error {
	return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
		Message: "secrets are unavailable on this gateway: " + why}
}
