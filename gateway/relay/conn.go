package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/internal/ticker"
)

// ServeStep upgrades req to a websocket and relays step stepID's frames
// after frame from to it, until the exit frame, the browser's close, a
// failure, or the end of req's context (the server's shutdown: close
// 1001). interactive says whether the browser may send input (a tty step,
// a caller who may write); it needs Config.Stdin and Config.Resize.
//
// The caller has authorized the request. A refused handshake (a bad
// Origin: 403) is answered before any upgrade. ServeStep returns once the
// connection is closed and every goroutine it started has ended.
//
// Three goroutines serve a connection. The calling goroutine is the only
// writer: frames, pings, pongs and the close frame. The pump reads the
// upstream, resumes it when it breaks, and hands the writer one frame at
// a time, reading the next only once the writer has sent it. The reader
// reads the browser's messages, keeps the read deadline, passes input to
// Config.Stdin and Config.Resize, and reports the browser's close or a
// refused message to the writer.
func (r *Relay) ServeStep(w http.ResponseWriter, req *http.Request, stepID string, from uint64, interactive bool) {
	r.ServeStream(w, req, Stream{StepID: stepID, From: from, Interactive: interactive})
}

// Stream is one stream request as the gateway authorized it, with the
// hooks it keeps on the stream.
type Stream struct {
	StepID      string
	From        uint64
	Interactive bool
	// Check, if not nil, authorizes the caller again every
	// Config.Recheck while the stream is open, from a goroutine of its
	// own. A *Revoked error closes the stream with its code and reason;
	// any other error (the credential could not be checked) is logged and
	// the stream goes on.
	Check func(ctx context.Context) error
	// Opened, if not nil, is called once the websocket is open; Closed,
	// if not nil, once it is closed, with the input the browser sent.
	Opened func()
	Closed func(Input)
}

// Input is what a stream passed to the step's terminal.
type Input struct {
	// Bytes and Messages count the stdin messages' data and the
	// messages; Resizes the resize messages.
	Bytes, Messages, Resizes int64
	// Open is how long the stream was open.
	Open time.Duration
}

// Revoked is Stream.Check's refusal: the caller may no longer read the
// stream.
type Revoked struct {
	// Code is the close code: CloseUnauthorized or CloseForbidden.
	Code   int
	Reason string
}

func (e *Revoked) Error() string { return e.Reason }

// ServeStream is ServeStep with the stream's hooks.
func (r *Relay) ServeStream(w http.ResponseWriter, req *http.Request, st Stream) {
	stepID := st.StepID
	conn, err := r.upgrader.Upgrade(w, req, nil)
	if err != nil {
		// The upgrader has answered the request.
		r.logger.Debug("websocket handshake", "step", stepID, "error", err)
		return
	}
	m := r.cfg.Metrics
	m.streamStarted()
	defer m.streamEnded()
	opened := time.Now()
	if st.Opened != nil {
		st.Opened()
	}

	ctx, cancel := context.WithCancel(req.Context())
	s := &session{
		cfg:         &r.cfg,
		up:          r.up,
		conn:        conn,
		id:          stepID,
		interactive: st.Interactive && r.cfg.Stdin != nil && r.cfg.Resize != nil,
		logger:      r.logger.With("step", stepID),
		lines:       make(chan []byte),
		acks:        make(chan struct{}),
		pumpDone:    make(chan end, 1),
		pings:       make(chan string, 1),
		readDone:    make(chan error, 1),
		revoked:     make(chan *Revoked, 1),
	}
	var wg sync.WaitGroup
	defer func() {
		cancel()
		conn.Close()
		wg.Wait()
		if st.Closed != nil {
			in := s.in
			in.Open = time.Since(opened)
			st.Closed(in)
		}
	}()
	wg.Go(func() { s.readLoop(ctx) })
	wg.Go(func() { s.pumpDone <- s.pump(ctx, st.From) })
	if st.Check != nil {
		wg.Go(func() { s.recheck(ctx, st.Check) })
	}

	e := s.writeLoop(ctx)
	// Stop the pump and the input before saying goodbye.
	cancel()
	switch {
	case e.code == websocket.CloseInternalServerErr:
		s.logger.Warn("stream broken", "frames", s.frames, "close_code", e.code, "close_reason", e.reason, "error", e.err)
	default:
		s.logger.Debug("stream ended", "frames", s.frames, "close_code", e.code, "close_reason", e.reason, "error", e.err)
	}
	if e.code != 0 {
		s.close(e.code, e.reason)
	}
}

// end is how a stream ends: the close frame to send (code 0 for none: the
// connection is gone) and the error behind it, if any.
type end struct {
	code   int
	reason string
	err    error
}

// session is one relayed stream.
type session struct {
	cfg         *Config
	up          Upstream
	conn        *websocket.Conn
	id          string
	interactive bool
	logger      *slog.Logger

	// lines carries the next frame from the pump to the writer, which
	// answers on acks once it has sent it: only then does the pump reuse
	// the frame's buffer.
	lines chan []byte
	acks  chan struct{}
	// pumpDone receives the pump's one result: the exit frame was sent
	// (close 1000), or the stream cannot go on.
	pumpDone chan end
	// pings carries the payload of the browser's latest ping to the
	// writer.
	pings chan string
	// readDone receives the reader's one error: the browser's close
	// (*websocket.CloseError), a refused message (*clientError), or a
	// broken connection.
	readDone chan error

	// revoked receives the checker's one refusal of the caller.
	revoked chan *Revoked

	// Owned by the writer: readEnded is set once it has received from
	// readDone; frames counts the frames sent.
	readEnded bool
	frames    int
	// Owned by the reader: the input passed on.
	in Input
}

// recheck calls check every Recheck until ctx ends or check refuses the
// caller, which it reports to the writer.
func (s *session) recheck(ctx context.Context, check func(context.Context) error) {
	ticker.Every(ctx, s.cfg.Recheck, func() bool {
		err := check(ctx)
		var rv *Revoked
		switch {
		case errors.As(err, &rv):
			s.revoked <- rv
			return false
		case err != nil && ctx.Err() == nil:
			s.logger.Warn("re-check the stream's caller; the stream goes on", "error", err)
		}
		return true
	})
}

// writeLoop sends frames, pings and pongs until the stream ends, and
// returns how.
func (s *session) writeLoop(ctx context.Context) end {
	ping := time.NewTicker(s.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case b := <-s.lines:
			s.conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteWait))
			if err := s.conn.WriteMessage(websocket.TextMessage, b); err != nil {
				return end{err: err}
			}
			s.frames++
			s.cfg.Metrics.relayed(len(b))
			select {
			case s.acks <- struct{}{}:
			case <-ctx.Done(): // the pump has stopped waiting
			}
		case e := <-s.pumpDone:
			if e.code == 0 && ctx.Err() != nil {
				return stopping(ctx)
			}
			return e
		case <-ping.C:
			if err := s.control(websocket.PingMessage, nil); err != nil {
				return end{err: err}
			}
		case payload := <-s.pings:
			if err := s.control(websocket.PongMessage, []byte(payload)); err != nil {
				return end{err: err}
			}
		case err := <-s.readDone:
			s.readEnded = true
			return clientEnd(err)
		case rv := <-s.revoked:
			return end{code: rv.Code, reason: rv.Reason, err: rv}
		case <-ctx.Done():
			return stopping(ctx)
		}
	}
}

// stopping is the end of a stream whose context ended: the server is
// shutting down.
func stopping(ctx context.Context) end {
	return end{code: websocket.CloseGoingAway, reason: "gateway stopping; reconnect with from=<last seq>", err: ctx.Err()}
}

// clientEnd is the end of a stream whose reader reported err.
func clientEnd(err error) end {
	var ce *websocket.CloseError
	var refused *clientError
	switch {
	case errors.As(err, &refused):
		return end{code: refused.code, reason: refused.reason, err: err}
	case errors.As(err, &ce):
		// The browser closed: answer with its code.
		switch ce.Code {
		case websocket.CloseAbnormalClosure, websocket.CloseTLSHandshake:
			// Reported locally, never sent: the connection is gone.
			return end{err: err}
		case websocket.CloseNoStatusReceived:
			return end{code: websocket.CloseNormalClosure, err: err}
		}
		return end{code: ce.Code, err: err}
	}
	return end{err: err}
}

func (s *session) control(kind int, payload []byte) error {
	return s.conn.WriteControl(kind, payload, time.Now().Add(s.cfg.WriteWait))
}

// close sends a close frame and waits, for at most CloseWait, for the
// browser's answer or the end of the connection.
func (s *session) close(code int, reason string) {
	msg := websocket.FormatCloseMessage(code, truncate(reason, maxCloseReason))
	if err := s.control(websocket.CloseMessage, msg); err != nil || s.readEnded {
		return
	}
	t := time.NewTimer(s.cfg.CloseWait)
	defer t.Stop()
	select {
	case <-s.readDone:
	case <-t.C:
	}
}

// maxCloseReason is the most a close frame's reason may hold (a control
// frame carries 125 bytes, 2 of them the code).
const maxCloseReason = 123

// truncate shortens s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// readLoop reads the browser's messages until the connection fails or
// closes or a message is refused, and reports which on readDone. It never
// writes. Input read once ctx has ended (the writer is closing) is
// dropped.
func (s *session) readLoop(ctx context.Context) {
	extend := func() { s.conn.SetReadDeadline(time.Now().Add(s.cfg.PongWait)) }
	extend()
	s.conn.SetPongHandler(func(string) error { extend(); return nil })
	s.conn.SetPingHandler(func(payload string) error {
		select {
		case s.pings <- payload:
		default: // the writer has a pong to send already
		}
		extend()
		return nil
	})
	s.conn.SetCloseHandler(func(int, string) error { return nil }) // the writer answers
	var buf bytes.Buffer
	for {
		kind, rd, err := s.conn.NextReader()
		if err != nil {
			s.readDone <- err
			return
		}
		extend()
		if kind != websocket.TextMessage {
			s.readDone <- &clientError{websocket.CloseUnsupportedData, "binary messages are not accepted; send JSON text"}
			return
		}
		if !s.interactive {
			s.readDone <- refuse("this stream takes no input: the step has no tty, or you may not write to it")
			return
		}
		// The connection has no read limit (gorilla would close with
		// 1009 and no reason by itself): the limit is applied here.
		buf.Reset()
		n, err := buf.ReadFrom(io.LimitReader(rd, int64(s.cfg.MaxMessage)+1))
		if err != nil {
			s.readDone <- err
			return
		}
		if n > int64(s.cfg.MaxMessage) {
			s.readDone <- refuse("message too big: more than %d bytes", s.cfg.MaxMessage)
			return
		}
		f, err := decodeClientFrame(buf.Bytes())
		if err != nil {
			s.readDone <- err
			return
		}
		if ctx.Err() == nil {
			s.input(ctx, f)
		}
	}
}

// input passes a browser's input to the step.
func (s *session) input(ctx context.Context, f clientFrame) {
	var err error
	switch f.Type {
	case typeStdin:
		s.in.Messages++
		s.in.Bytes += int64(len(f.Data))
		err = s.cfg.Stdin(ctx, s.id, []byte(f.Data))
	case typeResize:
		s.in.Resizes++
		err = s.cfg.Resize(ctx, s.id, f.Cols, f.Rows)
	}
	if err != nil && ctx.Err() == nil {
		s.logger.Info("step input dropped", "type", f.Type, "error", err)
	}
}
