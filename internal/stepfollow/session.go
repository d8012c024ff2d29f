package stepfollow

import (
	"context"
	"os"
	"sync"

	"github.com/rodon-compute/rodon/api"
)

// Session follows one step: a watch keeps its latest record from the
// scheduler, and Follow copies its output. Start begins the watch; Close
// ends every goroutine of the session and waits for them. The methods
// may be called from any goroutine until Close.
type Session struct {
	cfg   Config
	watch *watch
	// stop ends the session's context (Close, or a second interrupt).
	stop context.CancelFunc
	// done is closed by Close: the interrupt handler stops.
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu       sync.Mutex
	detached bool
}

// Start begins watching the step whose record first is, and returns the
// session and a context derived from ctx that ends when the session is
// closed or detached (HandleInterrupts).
func Start(ctx context.Context, cfg Config, first api.Step) (*Session, context.Context) {
	ctx, stop := context.WithCancel(ctx)
	s := &Session{cfg: cfg, watch: newWatch(cfg.Client, first, cfg.Warn), stop: stop, done: make(chan struct{})}
	s.wg.Go(func() { s.watch.Run(ctx) })
	return s, ctx
}

// Close stops the watch and the interrupt handler and waits for every
// goroutine of the session. Calling it again does nothing.
func (s *Session) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.stop()
		s.wg.Wait()
	})
}

// Follow copies the step's output (see Config) until its exit frame and
// returns the exit frame's data. It returns an error wrapping ErrNoStream
// when the output cannot be read to its end: the step ended without being
// placed, or it ended and its node stopped sending for StallGrace. Each
// call reads the output from its start: call it once per session.
func (s *Session) Follow(ctx context.Context) (*api.Exit, error) {
	st, _, _ := s.watch.Current()
	return (&streamer{Config: s.cfg, id: st.ID}).follow(ctx, s.watch)
}

// Current returns the latest record of the step, and the error that ended
// the watch (the step is gone) if it did.
func (s *Session) Current() (api.Step, error) {
	st, _, err := s.watch.Current()
	return st, err
}

// WaitFor returns the first record of the step for which ok holds, or the
// latest one and why it stopped waiting (ctx ended, or the step is gone).
func (s *Session) WaitFor(ctx context.Context, ok func(api.Step) bool) (api.Step, error) {
	return s.watch.WaitFor(ctx, ok)
}

// HandleInterrupts answers the user's interrupts until Close: at the
// first it calls first in a goroutine of the session with the session's
// context (to cancel the step, say); at the second it detaches: the
// session's context ends and Detached reports true. Call it at most once.
func (s *Session) HandleInterrupts(ctx context.Context, interrupts <-chan os.Signal, first func(ctx context.Context)) {
	s.wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-s.done:
				return
			case <-interrupts:
			}
			if n > 0 {
				s.mu.Lock()
				s.detached = true
				s.mu.Unlock()
				s.stop()
				return
			}
			s.wg.Go(func() { first(ctx) })
		}
	})
}

// Detached reports whether a second interrupt detached the session.
func (s *Session) Detached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detached
}
