package netpolicy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// createNS makes a fresh network namespace and bind-mounts it at path, as
// ip-netns(8) and netns.NewNamed do, but at a path of our choosing. The
// namespace is entered on a locked thread of a throwaway goroutine that
// never unlocks it, so the runtime discards that thread instead of reusing it
// in the wrong namespace.
func createNS(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create namespace directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create namespace file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind-mount network namespace at %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// removeNS unmounts and removes a namespace made by createNS. A missing or
// unmounted path is not an error. The kernel destroys the namespace, and
// any interfaces left in it, once nothing else holds it.
func removeNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove network namespace %s: %w", path, err)
	}
	return nil
}

// listNS returns the names in dir that start with NSPrefix.
func listNS(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), NSPrefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// doInNS runs fn on a thread that is in namespace ns. Sockets and child
// processes made by fn belong to ns. The thread is discarded afterwards.
func doInNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
