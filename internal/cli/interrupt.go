package cli

import (
	"context"
	"errors"
	"os"
	"sync"
)

// ErrInterrupted is returned by commands the user stopped with Ctrl-C.
var ErrInterrupted = errors.New("interrupted")

// Interruptible returns a context that ends at the first value from
// interrupts (the user's Ctrl-C), and a function that releases it and
// returns ErrInterrupted if the interrupt came, else err. Call release
// exactly once; the goroutine that waits for the interrupt has ended when
// it returns.
func Interruptible(parent context.Context, interrupts <-chan os.Signal) (ctx context.Context, release func(err error) error) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	var interrupted bool
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-interrupts:
			interrupted = true
			cancel()
		case <-done:
		}
	})
	return ctx, func(err error) error {
		close(done)
		wg.Wait()
		cancel()
		if interrupted {
			return ErrInterrupted
		}
		return err
	}
}
