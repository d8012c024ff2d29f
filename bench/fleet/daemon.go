package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// operator is the identity the benchmark's own scheduler clients and
// schedctl act as.
var operator = pki.Identity{Role: pki.RoleOperator, Name: "bench"}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// daemon is a process the benchmark started; its output goes to log.
type daemon struct {
	cmd *exec.Cmd
	log string
}

func startDaemon(logFile, name string, args ...string) (*daemon, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &daemon{cmd: cmd, log: logFile}, nil
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
}

// tail is the end of the daemon's log, for an error message.
func (d *daemon) tail() string {
	b, _ := os.ReadFile(d.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return filepath.Base(d.log) + ":\n" + strings.Join(lines, "\n")
}

// schedCluster is n scheduler members of one mode.
type schedCluster struct {
	mode benchtls.Mode
	ds   []*daemon
	urls string
	// op is a client acting as the operator.
	op *client.Client
}

// startCluster starts n scheduler members in mode, keeping their data and
// logs under dir/NAME-MODE-mI. On error the caller still calls stop.
func startCluster(binDir, dir, name string, mode benchtls.Mode, n int) (*schedCluster, error) {
	sc := &schedCluster{mode: mode}
	var ids []pki.Identity
	for i := range n {
		ids = append(ids, pki.Identity{Role: pki.RoleMember, Name: fmt.Sprintf("m%d", i+1)})
	}
	var urls []string
	first := ""
	for i, id := range ids {
		base := filepath.Join(dir, fmt.Sprintf("%s-%s-%s", name, mode.Short(), id.Name))
		if err := os.MkdirAll(base, 0o700); err != nil {
			return sc, err
		}
		httpAddr := freeAddr()
		args := []string{"serve", "--node-id", id.Name, "--data-dir", base, "--raft-addr", freeAddr(), "--http-addr", httpAddr}
		args = append(args, mode.SchedulerFlags()...)
		if i == 0 {
			args = append(args, "--bootstrap")
			first = httpAddr
		} else {
			args = append(args, "--join", first)
		}
		d, err := startDaemon(base+".log", binDir+"/scheduler", args...)
		if err != nil {
			return sc, err
		}
		sc.ds = append(sc.ds, d)
		urls = append(urls, mode.URL(httpAddr))
		c, err := mode.Client(urls[i], operator, client.Options{RetryFor: 30 * time.Second})
		if err != nil {
			return sc, err
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			ms, err := c.Members(context.Background())
			if err == nil && len(ms) == i+1 {
				break
			}
			if time.Now().After(deadline) {
				return sc, fmt.Errorf("%s member %d did not join: %v\n%s", mode, i+1, err, d.tail())
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.CloseIdleConnections()
	}
	sc.urls = strings.Join(urls, ",")
	var err error
	sc.op, err = mode.Client(sc.urls, operator, client.Options{})
	return sc, err
}

func (sc *schedCluster) stop() {
	if sc.op != nil {
		sc.op.CloseIdleConnections()
	}
	for _, d := range sc.ds {
		d.stop()
	}
}
