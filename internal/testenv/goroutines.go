package testenv

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// CheckGoroutines fails t if a goroutine running code of one of pkgs (an
// import path such as "github.com/rodon-compute/rodon/agentd", its
// sub-packages included) is still alive after a grace of 5 seconds: one
// with a frame of such code, from a file that is not a test, on its stack
// (who created it does not count). Goroutines of the tests themselves (the
// test's own, under testing.tRunner, and those a test starts to run a
// component) are not counted; the component's are. Call it after
// the component under test stopped, or from t.Cleanup.
func CheckGoroutines(t testing.TB, pkgs ...string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = goroutinesOf(pkgs)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("%d goroutines left running:\n%s", len(left), strings.Join(left, "\n\n"))
}

// goroutinesOf returns the stacks of the goroutines running code of pkgs.
func goroutinesOf(pkgs []string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testenv.CheckGoroutines") {
			continue
		}
		if runsCodeOf(g, pkgs) {
			out = append(out, g)
		}
	}
	return out
}

// runsCodeOf reports whether the goroutine of stack g has a frame of
// non-test code of pkgs.
func runsCodeOf(g string, pkgs []string) bool {
	frames, _, _ := strings.Cut(g, "\ncreated by ")
	lines := strings.Split(frames, "\n")
	// lines[0] is the goroutine header; then each frame is a function
	// line and a file line.
	for i := 1; i+1 < len(lines); i += 2 {
		fn, file := lines[i], strings.TrimSpace(lines[i+1])
		file, _, _ = strings.Cut(file, ":")
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		for _, p := range pkgs {
			if strings.HasPrefix(fn, p+".") || strings.HasPrefix(fn, p+"/") {
				return true
			}
		}
	}
	return false
}
