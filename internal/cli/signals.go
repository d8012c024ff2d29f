package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Signals is how a daemon hears its signals: ctx ends on SIGINT or SIGTERM,
// and every SIGHUP (reload the certificates and the other files) is a
// value on hup. Call it before start-up, so that a SIGTERM during start-up
// stops the daemon cleanly and an early SIGHUP does not kill it; stop
// releases both.
func Signals() (ctx context.Context, hup <-chan os.Signal, stop func()) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	h := make(chan os.Signal, 1)
	signal.Notify(h, syscall.SIGHUP)
	return ctx, h, func() {
		signal.Stop(h)
		cancel()
	}
}
