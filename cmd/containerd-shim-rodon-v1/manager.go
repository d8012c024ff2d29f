package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/sys"
	"golang.org/x/sys/unix"
	gvshim "gvisor.dev/gvisor/pkg/shim/v1"
)

const (
	// sandboxIDAnnotation names the pod sandbox a container belongs to.
	// Containers with the same value share one shim process.
	sandboxIDAnnotation = "io.kubernetes.cri.sandbox-id"

	// shimOOMScore is the score gVisor's shim gives itself. Lowering a score
	// needs CAP_SYS_RESOURCE.
	shimOOMScore = -999

	// addressFile is the file in the bundle directory where gVisor's task
	// service looks up the shim socket to remove it at shutdown.
	addressFile = "address"
)

// manager is gVisor's shim manager with its own Start. Name, Stop and Info
// are gVisor's.
type manager struct {
	shim.Manager
}

func newManager(name string) *manager {
	return &manager{Manager: gvshim.NewShimManager(name)}
}

// Start starts the shim daemon for container id, or finds the running one of
// its sandbox, and returns the address containerd dials. It runs in the
// bundle directory, and containerd parses everything it writes to stdout or
// stderr as the reply, so it must print nothing: shim.Run prints the reply.
//
// It follows gVisor's manager.Start except that the shim always joins its
// sandbox's shim (gVisor does so only with "grouping" set in a global
// config.toml) and that a shim which may not lower its OOM score keeps the
// score containerd's runc shim uses (containerd's score + 1).
func (m *manager) Start(ctx context.Context, id string, opts shim.StartOpts) (_ shim.BootstrapParams, retErr error) {
	group, err := shimGroup(id)
	if err != nil {
		return shim.BootstrapParams{}, err
	}
	address, err := shim.SocketAddress(ctx, opts.Address, group, opts.Debug)
	if err != nil {
		return shim.BootstrapParams{}, err
	}
	reply := shim.BootstrapParams{Version: 2, Address: address, Protocol: "ttrpc"}

	socket, err := shim.NewSocket(address)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return shim.BootstrapParams{}, fmt.Errorf("create shim socket: %w", err)
		}
		if shim.CanConnect(address) {
			// The sandbox's shim is running: serve this container from it.
			if err := os.WriteFile(addressFile, []byte(address), 0o644); err != nil {
				return shim.BootstrapParams{}, fmt.Errorf("write shim address: %w", err)
			}
			return reply, nil
		}
		if err := shim.RemoveSocket(address); err != nil {
			return shim.BootstrapParams{}, fmt.Errorf("remove stale shim socket: %w", err)
		}
		if socket, err = shim.NewSocket(address); err != nil {
			return shim.BootstrapParams{}, fmt.Errorf("create shim socket: %w", err)
		}
	}
	defer func() {
		if retErr != nil {
			socket.Close()
			_ = shim.RemoveSocket(address)
		}
	}()
	if err := os.WriteFile(addressFile, []byte(address), 0o644); err != nil {
		return shim.BootstrapParams{}, fmt.Errorf("write shim address: %w", err)
	}

	cmd, err := daemonCommand(ctx, id, opts)
	if err != nil {
		return shim.BootstrapParams{}, err
	}
	f, err := socket.File()
	if err != nil {
		return shim.BootstrapParams{}, err
	}
	defer f.Close()
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	if err := cmd.Start(); err != nil {
		return shim.BootstrapParams{}, fmt.Errorf("start shim daemon: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = cmd.Process.Kill()
		}
	}()
	go cmd.Wait() //nolint:errcheck // this process exits right after replying

	if err := shim.WritePidFile("shim.pid", cmd.Process.Pid); err != nil {
		return shim.BootstrapParams{}, err
	}
	if err := setOOMScore(cmd.Process.Pid); err != nil {
		return shim.BootstrapParams{}, err
	}
	return reply, nil
}

// shimGroup returns the id whose shim serves the container: its sandbox's id
// from the bundle's config.json, or its own id.
func shimGroup(id string) (string, error) {
	b, err := os.ReadFile("config.json")
	if err != nil {
		return "", fmt.Errorf("read config.json when starting shim: %w", err)
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("decode config.json when starting shim: %w", err)
	}
	if g := spec.Annotations[sandboxIDAnnotation]; g != "" {
		return g, nil
	}
	return id, nil
}

// daemonCommand returns the command that runs this binary as the shim daemon
// serving the socket passed as its first extra file.
func daemonCommand(ctx context.Context, id string, opts shim.StartOpts) (*exec.Cmd, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	args := []string{"-namespace", ns, "-address", opts.Address, "-id", id}
	if opts.Debug {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// setOOMScore makes the shim daemon less likely to be OOM-killed than its
// containers. Without CAP_SYS_RESOURCE it settles for containerd's score + 1,
// which needs no capability, as containerd's runc shim does; a permission
// error there too is ignored.
func setOOMScore(pid int) error {
	err := sys.SetOOMScore(pid, shimOOMScore)
	if err == nil {
		return nil
	}
	if !errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("set shim OOM score: %w", err)
	}
	// Not a warning in a log: nothing may be printed during Start, and this is
	// the expected case on Rodon hosts.
	if err := shim.AdjustOOMScore(pid); err != nil && !errors.Is(err, os.ErrPermission) {
		return err
	}
	return nil
}
