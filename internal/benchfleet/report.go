package benchfleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rodon-compute/rodon/internal/benchtls"
)

// Certificates makes a cluster CA in a new temporary directory
// (benchtls.Setup) and issues there the certificates of the fleets o
// starts. It returns the two modes and a function that removes the
// directory, which the caller calls when the fleets are closed, also
// after an error (remove is never nil).
func Certificates(binDir string, o Options) (tlsMode, plain benchtls.Mode, remove func(), err error) {
	dir, err := os.MkdirTemp("", o.Prefix+"-tls")
	if err != nil {
		return tlsMode, plain, func() {}, err
	}
	remove = func() { os.RemoveAll(dir) }
	if tlsMode, plain, err = benchtls.Setup(binDir, dir); err != nil {
		return tlsMode, plain, remove, err
	}
	return tlsMode, plain, remove, tlsMode.Issue(o.Identities(tlsMode), "127.0.0.1")
}

// Finish ends a benchmark's main: it prints report to stdout, also
// writes it to file out unless out or report is empty, and returns the
// exit status, 1 after printing the error on stderr, prefixed with the
// benchmark's name, when err is not nil or the write failed.
func Finish(name, out, report string, err error) int {
	fmt.Print(report)
	if out != "" && report != "" {
		if werr := os.WriteFile(out, []byte(report), 0o644); werr != nil {
			err = errors.Join(err, fmt.Errorf("write the report to %s: %w", filepath.Clean(out), werr))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
