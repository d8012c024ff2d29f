package gateway

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestReloadLoop: every value of Config.Reload calls every Reloader, a
// failing one does not keep the others from running, and the loop ends
// with its context.
func TestReloadLoop(t *testing.T) {
	hup := make(chan os.Signal)
	var cluster, public atomic.Int32
	g := &Gateway{log: slog.New(slog.DiscardHandler), cfg: Config{Reload: hup, Reloaders: []Reloader{
		{What: "the cluster certificate", Reload: func() error { cluster.Add(1); return errors.New("bad file") }},
		{What: "--https-cert", Reload: func() error { public.Add(1); return nil }},
	}}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); g.reloadLoop(ctx) }()
	// Each send is taken by the loop, which finishes its round before it
	// looks at ctx again.
	for range 3 {
		hup <- syscall.SIGHUP
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reloadLoop still running 5s after its context ended")
	}
	if c, p := cluster.Load(), public.Load(); c != 3 || p != 3 {
		t.Errorf("reloads: cluster %d, public %d; want 3 each", c, p)
	}
}
