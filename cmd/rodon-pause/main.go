// Command rodon-pause is the init process of every step's pod sandbox. It
// does nothing until agentd tells it the step is over, then exits, so that
// the sandbox tears itself down without a kill from the host (a kill costs
// a runsc invocation and a slower teardown).
//
// agentd tells it by creating the file "exit" in the control directory it
// bind-mounts read-only at /run/rodon/ctl, after containerd has reported the
// step's exit. Signals are ignored: a step cannot end its own sandbox early.
// agentd still kills the pod if the pause has not exited in time.
//
// It must be statically linked: it runs inside images that may lack a libc.
package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

const (
	exitFile = "/run/rodon/ctl/exit"
	poll     = 2 * time.Millisecond
)

func main() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	for {
		if _, err := os.Stat(exitFile); err == nil {
			os.Exit(0)
		}
		time.Sleep(poll)
	}
}
