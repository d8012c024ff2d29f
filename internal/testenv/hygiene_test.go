package testenv

import (
	"errors"
	"testing"
	"time"
)

func TestGoroutinesFindsALeftGoroutine(t *testing.T) {
	started, stop := make(chan struct{}), make(chan struct{})
	go leakyLoop(started, stop)
	<-started
	if left := Goroutines(50*time.Millisecond, "testenv.leakyLoop"); len(left) != 1 {
		t.Errorf("Goroutines found %d goroutines of leakyLoop, want 1", len(left))
	}
	close(stop)
	if left := Goroutines(2*time.Second, "testenv.leakyLoop"); len(left) != 0 {
		t.Errorf("Goroutines found %d goroutines of leakyLoop after it ended, want 0:\n%s", len(left), left)
	}
}

func leakyLoop(started, stop chan struct{}) {
	close(started)
	<-stop
}

func TestWait(t *testing.T) {
	n := 0
	if err := Wait(time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Errorf("Wait = %v after %d calls, want nil after 3", err, n)
	}
	if err := Wait(30*time.Millisecond, func() error { return errors.New("never") }); err == nil || err.Error() != "never" {
		t.Errorf("Wait = %v, want the condition's last error", err)
	}
}
