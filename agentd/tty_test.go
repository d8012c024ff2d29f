package agentd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestTTYInputAndResize runs a shell on a terminal, types into it and
// resizes it, and reads the answers from its output.
func TestTTYInputAndResize(t *testing.T) {
	rt := newTestRuntime(t)
	st := newStep(t, "sh", "-c", `read line; echo "got:$line"; read x; stty size; read y; exit 4`)
	st.TTY = true
	sb, err := rt.Create(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	var out testenv.SyncBuffer
	if err := sb.Start(t.Context(), &out, &out); err != nil {
		t.Fatal(err)
	}
	waitOut := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("output %q never contained %q", out.String(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := sb.Input([]byte("hello tty\r")); err != nil {
		t.Fatalf("Input() = %v", err)
	}
	waitOut("got:hello tty")
	if err := sb.Resize(t.Context(), 0, 10); err == nil {
		t.Error("Resize(0, 10) = nil, want an error naming the size")
	}
	if err := sb.Resize(t.Context(), 132, 43); err != nil {
		t.Fatalf("Resize() = %v", err)
	}
	if err := sb.Input([]byte("\r")); err != nil {
		t.Fatal(err)
	}
	waitOut("43 132")
	if err := sb.Input([]byte("\r")); err != nil {
		t.Fatal(err)
	}
	rec, err := sb.Wait(t.Context())
	if err != nil || rec.ExitCode != 4 {
		t.Fatalf("Wait() = %+v, %v; want exit 4", rec, err)
	}
	if err := sb.Input([]byte("late\r")); !errors.Is(err, ErrNotInteractive) {
		t.Errorf("Input after exit = %v, want ErrNotInteractive", err)
	}
}

// TestInputNotTTY checks that a step without a terminal takes no input.
func TestInputNotTTY(t *testing.T) {
	rt := newTestRuntime(t)
	sb, err := rt.Create(t.Context(), newStep(t, "sleep", "5"))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	var out testenv.SyncBuffer
	if err := sb.Start(t.Context(), &out, &out); err != nil {
		t.Fatal(err)
	}
	if err := sb.Input([]byte("x")); !errors.Is(err, ErrNotInteractive) {
		t.Errorf("Input() = %v, want ErrNotInteractive", err)
	}
	if err := sb.Resize(t.Context(), 80, 24); !errors.Is(err, ErrNotInteractive) {
		t.Errorf("Resize() = %v, want ErrNotInteractive", err)
	}
}
