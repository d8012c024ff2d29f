package testenv

import "testing"

func TestRunsCodeOf(t *testing.T) {
	const pkg = "github.com/rodon-compute/rodon/agentd"
	for _, tt := range []struct {
		name, stack string
		want        bool
	}{
		{"component", `goroutine 7 [select]:
github.com/rodon-compute/rodon/agentd.(*Server).Run(0x1)
	/src/agentd/server.go:120 +0x1
created by github.com/rodon-compute/rodon/agentd.TestX in goroutine 6
	/src/agentd/server_test.go:10 +0x1`, true},
		{"sub-package", `goroutine 8 [select]:
github.com/rodon-compute/rodon/agentd/logstore.(*Store).Run(0x1)
	/src/agentd/logstore/janitor.go:20 +0x1`, true},
		{"test closure running another package", `goroutine 9 [select]:
github.com/rodon-compute/rodon/scheduler.(*Server).Run(0x1)
	/src/scheduler/server.go:311 +0x1
github.com/rodon-compute/rodon/agentd.startScheduler.func1()
	/src/agentd/server_test.go:75 +0x1
created by github.com/rodon-compute/rodon/agentd.startScheduler in goroutine 3
	/src/agentd/server_test.go:75 +0x1`, false},
		{"only created by it", `goroutine 10 [IO wait]:
net/http.(*conn).serve(0x1)
	/go/src/net/http/server.go:2000 +0x1
created by github.com/rodon-compute/rodon/agentd.(*Server).Run in goroutine 7
	/src/agentd/server.go:130 +0x1`, false},
		{"another package with the prefix", `goroutine 11 [select]:
github.com/rodon-compute/rodon/agentdx.Run(0x1)
	/src/agentdx/x.go:1 +0x1`, false},
	} {
		if got := runsCodeOf(tt.stack, []string{pkg}); got != tt.want {
			t.Errorf("%s: runsCodeOf() = %v, want %v", tt.name, got, tt.want)
		}
	}
	// A function as the pattern.
	for _, tt := range []struct {
		name, stack, pattern string
		want                 bool
	}{
		{"http connection", `goroutine 10 [IO wait]:
net/http.(*conn).serve(0x1)
	/go/src/net/http/server.go:2000 +0x1`, "net/http.(*conn).serve", true},
		{"method of a type", `goroutine 12 [select]:
github.com/rodon-compute/rodon/scheduler.(*Raft).Run(0x1)
	/src/scheduler/raft.go:10 +0x1`, "scheduler.(*Raft)", true},
		{"another method", `goroutine 13 [select]:
github.com/rodon-compute/rodon/scheduler.(*Server).Run(0x1)
	/src/scheduler/server.go:10 +0x1`, "scheduler.(*Raft)", false},
	} {
		if got := runsCodeOf(tt.stack, []string{tt.pattern}); got != tt.want {
			t.Errorf("%s: runsCodeOf() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
