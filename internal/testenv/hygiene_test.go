package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestGoroutinesFindsALeftGoroutine(t *testing.T) {
	// A goroutine of code that is not a test's: time.Sleep itself.
	go time.Sleep(500 * time.Millisecond)
	if err := Wait(time.Second, func() error {
		if n := len(goroutinesOf([]string{"time.Sleep"})); n != 1 {
			return fmt.Errorf("found %d goroutines in time.Sleep, want 1", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if left := Goroutines(3*time.Second, "time.Sleep"); len(left) != 0 {
		t.Errorf("Goroutines found %d goroutines in time.Sleep after it returned, want 0:\n%s", len(left), left)
	}
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
