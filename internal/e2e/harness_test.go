package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// bin holds the binaries built for the tests.
var bin string

func TestMain(m *testing.M) {
	if os.Getenv(denyBPFLinkEnv) == "1" && len(os.Args) > 1 {
		execDenyingBPFLink(os.Args[1:])
	}
	dir, err := os.MkdirTemp("", "rodon-e2e")
	if err != nil {
		panic(err)
	}
	bin = dir
	if err := setupTLS(filepath.Join(dir, "tls")); err != nil {
		fmt.Fprintf(os.Stderr, "cluster CA: %v\n", err)
		os.Exit(1)
	}
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/rodon-compute/rodon/cmd/scheduler", "github.com/rodon-compute/rodon/cmd/agentd", "github.com/rodon-compute/rodon/cmd/schedctl", "github.com/rodon-compute/rodon/cmd/gateway").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build binaries: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// proc is a daemon process of the test, its output kept for failures.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testenv.SyncBuffer
	done chan struct{}
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &testenv.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(30 * time.Second)
		if t.Failed() {
			t.Logf("output of %s (last 4 KiB):\n%s", name, tail(p.out.String(), 4096))
		}
	})
	return p
}

// stop sends SIGTERM and waits, then SIGKILL.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// cluster is a fleet of scheduler members and agents on loopback.
type fleet struct {
	httpAddrs  []string
	schedulers []*proc
	agents     []*proc
	// agentAddrs are the agents' --listen addresses, in agents' order.
	agentAddrs []string
	wsRoot     string
	// nodeTTL is the schedulers' --node-ttl (default 4s).
	nodeTTL time.Duration
	// schedArgs and agentArgs are more flags for every scheduler member
	// and every agent the harness starts.
	schedArgs, agentArgs []string
}

func (f *fleet) ttl() string {
	if f.nodeTTL == 0 {
		return "4s"
	}
	return f.nodeTTL.String()
}

func (f *fleet) urls() string {
	var u []string
	for _, a := range f.httpAddrs {
		u = append(u, "https://"+a)
	}
	return strings.Join(u, ",")
}

// startSchedulers starts n members: the first bootstraps, the others join.
func startSchedulers(t *testing.T, f *fleet, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m%d", i+1)
		httpAddr, raftAddr := freePort(t), freePort(t)
		args := []string{bin + "/scheduler", "serve", "--node-id", id, "--data-dir", t.TempDir(),
			"--raft-addr", raftAddr, "--http-addr", httpAddr, "--node-ttl", f.ttl()}
		args = append(args, tlsArgs(t, pki.RoleMember, id)...)
		args = append(args, f.schedArgs...)
		if i == 0 {
			args = append(args, "--bootstrap")
		} else {
			args = append(args, "--join", f.httpAddrs[0])
		}
		f.httpAddrs = append(f.httpAddrs, httpAddr)
		f.schedulers = append(f.schedulers, start(t, "scheduler "+id, args...))
		c := newClient(t, "https://"+httpAddr)
		waitFor(t, 30*time.Second, "member "+id+" to join", func() bool {
			ms, err := c.Members(context.Background())
			return err == nil && len(ms) == i+1
		})
	}
}

func startAgents(t *testing.T, f *fleet, n int) {
	t.Helper()
	f.wsRoot = t.TempDir()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("a%d", i+1)
		listen := freePort(t)
		f.agentAddrs = append(f.agentAddrs, listen)
		f.agents = append(f.agents, start(t, "agentd "+id, bin+"/agentd", "serve", "--tls-dir", tlsArgs(t, pki.RoleAgent, id)[1], "--scheduler", f.urls(),
			"--node-id", id, "--data-dir", t.TempDir(), "--listen", listen,
			"--heartbeat", "500ms", "--cpu", "2", "--memory", "4g", "--log-level", "info", "--network", "none"))
	}
	c := newClient(t, f.urls())
	waitFor(t, 60*time.Second, fmt.Sprintf("%d ready nodes", n), func() bool {
		nodes, err := c.Nodes(context.Background())
		ready := 0
		for _, nd := range nodes {
			if nd.State == "ready" {
				ready++
			}
		}
		return err == nil && ready == n
	})
}

func newClient(t *testing.T, urls string) *client.Client {
	t.Helper()
	c, err := client.New(urls, client.Options{RetryFor: 20 * time.Second, TLS: source(t, pki.RoleOperator, operatorName)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	testenv.Eventually(t, d, func() error {
		if !ok() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// storeLines returns how many lines file name holds at the head of
// workspace ws of the store (0 when it has no such file), and how many of
// the workspace's revisions step made.
func storeLines(t *testing.T, c *client.Client, ws, name, step string) (lines, revisions int) {
	t.Helper()
	revs, _, err := c.Revisions(context.Background(), ws, 1000, "")
	if err != nil && !client.IsNotFound(err) {
		t.Fatalf("revisions of %s: %v", ws, err)
	}
	for _, r := range revs {
		if r.Author.Kind == api.AuthorStep && r.Author.ID == step {
			revisions++
		}
	}
	f, err := c.File(context.Background(), ws, name, client.FileOptions{})
	if client.IsNotFound(err) {
		return 0, revisions
	} else if err != nil {
		t.Fatalf("%s of %s: %v", name, ws, err)
	}
	defer f.Body.Close()
	b, err := io.ReadAll(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n")), revisions
}

func countLines(t *testing.T, file string) int {
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	} else if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

var _ = filepath.Join
