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
// Each look costs a stat through gVisor's gofer. A sandbox with no step
// yet (a pooled one) looks every idlePoll; once agentd has created "step"
// there (when a step is bound to the sandbox), every stepPoll, so that the
// sandbox stops soon after its step. Looking every 2 ms cost about 9 % of
// a core per sandbox (docs/BENCHMARKS.md, "Burst of 100").
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
	stepFile = "/run/rodon/ctl/step"
	idlePoll = 250 * time.Millisecond
	stepPoll = 10 * time.Millisecond
)

func main() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	poll := idlePoll
	for {
		if _, err := os.Stat(exitFile); err == nil {
			os.Exit(0)
		}
		if poll == idlePoll {
			if _, err := os.Stat(stepFile); err == nil {
				poll = stepPoll
			}
		}
		time.Sleep(poll)
	}
}
