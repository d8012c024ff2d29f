// Package relay serves the gateway's GET /v1/steps/{id}/stream: it relays
// one step's stream from the node agent that holds it to one browser
// websocket.
//
// The relay reads the agent's NDJSON stream (an Upstream) one frame at a
// time and writes each frame, unchanged, as one websocket text message:
// the agent's frames are already the public api.Frame values. It holds at
// most one frame in memory per connection; the agent's TCP connection
// carries the back-pressure of a slow browser back to the node, whose log
// is on disk. If the upstream breaks before the exit frame, the relay opens
// it again after the last frame it relayed, so the browser sees neither a
// gap nor a repeat. After the exit frame it closes with 1000; a stream it
// cannot finish ends with 1011 and a reason, never with a normal close.
//
// On an interactive step (a tty step and a caller who may write) the
// browser may send {"type":"stdin","data":"..."} and
// {"type":"resize","cols":N,"rows":N}; they go to Config.Stdin and
// Config.Resize. Any other message, or any message on a step that is not
// interactive, is refused with a close frame (1003 for binary, 1008
// otherwise) whose reason says what was wrong.
//
// The gateway hands ServeStream a Stream with its hooks: Check authorizes
// the caller again every Config.Recheck (at most 30 s) from a goroutine of
// its own, which passes a refusal (*Revoked) to the writer, the one
// goroutine that writes: the stream then closes with 4401 or 4403 and the
// reason. Opened and Closed tell the gateway when the websocket opened and
// closed, and what input it passed to the terminal (for its audit log).
package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
)

// Config configures a Relay. Stdin, Resize and CheckOrigin come from the
// gateway; the rest have defaults (DefaultConfig).
type Config struct {
	// PingInterval is how often the browser is pinged; PongWait how long
	// the relay waits for any message (a pong) before it gives the browser
	// up. PongWait must exceed PingInterval.
	PingInterval time.Duration
	PongWait     time.Duration
	// WriteWait bounds each write to the browser.
	WriteWait time.Duration
	// CloseWait is how long the relay waits for the browser to answer its
	// close frame.
	CloseWait time.Duration
	// MaxMessage caps a message from the browser.
	MaxMessage int
	// MaxFrame caps one frame (one NDJSON line) from the upstream; a
	// longer line ends the stream with 1011.
	MaxFrame int
	// RetryTimeout bounds how long the relay keeps trying to open the
	// upstream again, counted from its last relayed frame or failure
	// without progress; after it the stream ends with 1011.
	RetryTimeout time.Duration
	// Recheck is how often Stream.Check runs while a stream is open (a
	// deleted or changed member's stream closes within it): at most
	// MaxRecheck.
	Recheck time.Duration

	// Stdin writes data to the step's terminal; Resize resizes it. They
	// are called from the connection's reader, one call at a time, with a
	// context that ends with the connection. Nil makes no stream
	// interactive. An error is logged and the input dropped (the step may
	// have ended; its exit frame follows).
	Stdin  func(ctx context.Context, stepID string, data []byte) error
	Resize func(ctx context.Context, stepID string, cols, rows int) error
	// Rewrite, if not nil, is given every frame that is not stdout or
	// stderr output (one NDJSON line, without its newline) and returns
	// the line to send instead: the gateway scrubs provider identifiers
	// from event messages and exit reasons. It must keep the frame's seq
	// and kind. It is called from the pump, one call at a time.
	Rewrite func(ctx context.Context, line []byte) []byte
	// CheckOrigin decides whether a browser's websocket handshake is
	// allowed; a refusal is answered 403 before any upgrade. Nil allows
	// only an Origin whose host is the request's Host (gorilla's default).
	CheckOrigin func(r *http.Request) bool
	// Metrics, if not nil, counts what the relay does.
	Metrics *Metrics
}

// DefaultConfig returns the configuration the gateway serves with, without
// Stdin, Resize and CheckOrigin.
func DefaultConfig() Config {
	return Config{
		PingInterval: 20 * time.Second,
		PongWait:     60 * time.Second,
		WriteWait:    10 * time.Second,
		CloseWait:    time.Second,
		MaxMessage:   64 << 10,
		MaxFrame:     1<<20 + 64<<10,
		RetryTimeout: 30 * time.Second,
		Recheck:      MaxRecheck,
	}
}

// MaxRecheck is the longest Config.Recheck, and its default: an open
// stream's caller is authorized again at least this often.
const MaxRecheck = 30 * time.Second

// Relay relays step streams to browser websockets. It is safe for
// concurrent use; each ServeStep call owns its connection and the
// goroutines it starts, and waits for them before it returns.
type Relay struct {
	cfg      Config
	up       Upstream
	logger   *slog.Logger
	upgrader websocket.Upgrader
}

// New returns a Relay of the streams of up. It starts no goroutine.
func New(cfg Config, up Upstream, logger *slog.Logger) (*Relay, error) {
	switch {
	case up == nil:
		return nil, errors.New("stream relay: no upstream")
	case cfg.PingInterval <= 0 || cfg.WriteWait <= 0 || cfg.CloseWait <= 0 || cfg.RetryTimeout <= 0 || cfg.Recheck <= 0:
		return nil, fmt.Errorf("stream relay config: ping interval %v, write wait %v, close wait %v, retry timeout %v and recheck %v must be positive",
			cfg.PingInterval, cfg.WriteWait, cfg.CloseWait, cfg.RetryTimeout, cfg.Recheck)
	case cfg.Recheck > MaxRecheck:
		return nil, fmt.Errorf("stream relay config: recheck %v: at most %v", cfg.Recheck, MaxRecheck)
	case cfg.PongWait <= cfg.PingInterval:
		return nil, fmt.Errorf("stream relay config: pong wait %v must exceed the ping interval %v", cfg.PongWait, cfg.PingInterval)
	case cfg.MaxMessage <= 0 || cfg.MaxFrame < 64:
		return nil, fmt.Errorf("stream relay config: max message %d must be positive and max frame %d at least 64 bytes", cfg.MaxMessage, cfg.MaxFrame)
	}
	r := &Relay{cfg: cfg, up: up, logger: logger.With("component", "relay")}
	r.upgrader = websocket.Upgrader{
		HandshakeTimeout: cfg.WriteWait,
		CheckOrigin:      cfg.CheckOrigin,
		Error:            handshakeError,
	}
	return r, nil
}

// codeForbidden is the gateway's error code for a refused credential or
// origin (docs/GATEWAY.md).
const codeForbidden = "forbidden"

func handshakeError(w http.ResponseWriter, _ *http.Request, status int, reason error) {
	code := api.CodeBadRequest
	if status == http.StatusForbidden {
		code = codeForbidden
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.NewError(code, "websocket handshake: "+reason.Error()))
}
