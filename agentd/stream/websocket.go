package stream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
)

// maxClientMessage bounds what a client may send: nothing but control
// frames is expected.
const maxClientMessage = 4 << 10

// errClientMessage is what the read loop reports when the client sends a
// data message, which this stream does not take.
var errClientMessage = errors.New("client sent a message")

// serveWebsocket upgrades the connection and sends the frames of rd, or,
// if the request was refused (fail), a close frame saying why.
//
// Two goroutines use the connection. The handler's goroutine is the only
// writer: frames, pings, pongs and the close frame. The read loop only
// reads: it keeps the read deadline, passes pings and the client's close to
// the writer, and ends when the connection fails or closes. The handler
// closes the connection and waits for the read loop before it returns.
func (h *Handler) serveWebsocket(w http.ResponseWriter, r *http.Request, id cluster.StepID, rd *logstore.Reader, fail *requestError) {
	if rd != nil {
		defer rd.Close()
	}
	conn, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader has answered the request.
		h.logger.Debug("websocket handshake", "step", id, "error", err)
		return
	}
	c := &wsConn{
		conn:     conn,
		cfg:      h.cfg,
		pings:    make(chan string, 1),
		readDone: make(chan error, 1),
	}
	var wg sync.WaitGroup
	wg.Go(c.readLoop)
	defer func() {
		conn.Close()
		wg.Wait()
	}()
	if fail != nil {
		c.close(fail.closeCode, fail.message)
		return
	}
	frames, code, reason, err := c.send(r.Context(), rd)
	switch {
	case code == websocket.CloseInternalServerErr:
		h.logger.Warn("stream broken", "step", id, "mode", "websocket", "frames", frames, "error", err)
	default:
		h.logger.Debug("stream ended", "step", id, "mode", "websocket", "frames", frames, "close_code", code, "error", err)
	}
	if code != 0 {
		c.close(code, reason)
	}
}

// wsConn is one websocket stream.
type wsConn struct {
	conn *websocket.Conn
	cfg  Config
	// pings carries the payload of the client's latest ping to the writer.
	pings chan string
	// readDone receives the read loop's one error: the client's close
	// (*websocket.CloseError), errClientMessage, or a broken connection.
	readDone chan error
	// readEnded is set once the writer has received from readDone.
	readEnded bool
}

// readLoop reads the connection until it fails or the client sends a data
// message, and reports which on readDone. It never writes.
func (c *wsConn) readLoop() {
	c.conn.SetReadLimit(maxClientMessage)
	extend := func() error { return c.conn.SetReadDeadline(time.Now().Add(c.cfg.PongWait)) }
	extend()
	c.conn.SetPongHandler(func(string) error { return extend() })
	c.conn.SetPingHandler(func(payload string) error {
		select {
		case c.pings <- payload:
		default: // the writer has a pong to send already
		}
		return extend()
	})
	c.conn.SetCloseHandler(func(int, string) error { return nil }) // the writer answers
	_, _, err := c.conn.NextReader()
	if err == nil {
		err = errClientMessage
	}
	c.readDone <- err
}

// send writes the frames of rd until the stream ends, and returns how many
// it sent and the close frame to end with (code 0 for none: the connection
// is broken).
func (c *wsConn) send(ctx context.Context, rd *logstore.Reader) (frames, code int, reason string, err error) {
	ping := time.NewTicker(c.cfg.PingInterval)
	defer ping.Stop()
	for {
		b, wait, err := rd.TryNext()
		switch {
		case b != nil:
			c.conn.SetWriteDeadline(time.Now().Add(c.cfg.WriteWait))
			if err := c.conn.WriteMessage(websocket.TextMessage, b); err != nil {
				return frames, 0, "", err
			}
			frames++
			// More frames may be ready: look at the other events
			// without waiting.
			wait = ready
		case errors.Is(err, io.EOF):
			return frames, websocket.CloseNormalClosure, "end of stream", nil
		case err != nil:
			return frames, websocket.CloseInternalServerErr, "output log unreadable; see the agent's log", err
		}
		if code, reason, err, done := c.event(ctx, ping.C, wait); done {
			return frames, code, reason, err
		}
	}
}

// ready is a closed channel: waiting on it does not block.
var ready = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// event waits for wait to be closed or for another event, and handles that
// event: a ping to send, a client's ping to answer, the end of the read
// loop, or the end of ctx. done reports that the stream must end, with the
// close frame to send (code 0 for none).
func (c *wsConn) event(ctx context.Context, ping <-chan time.Time, wait <-chan struct{}) (code int, reason string, err error, done bool) {
	select {
	case <-wait:
	case <-ping:
		if err := c.control(websocket.PingMessage, nil); err != nil {
			return 0, "", err, true
		}
	case payload := <-c.pings:
		if err := c.control(websocket.PongMessage, []byte(payload)); err != nil {
			return 0, "", err, true
		}
	case err := <-c.readDone:
		c.readEnded = true
		var ce *websocket.CloseError
		switch {
		case errors.As(err, &ce):
			// The client closed: answer with its code.
			switch ce.Code {
			case websocket.CloseAbnormalClosure, websocket.CloseTLSHandshake:
				// Reported locally, never sent: the connection is gone.
				return 0, "", err, true
			case websocket.CloseNoStatusReceived:
				return websocket.CloseNormalClosure, "", err, true
			}
			return ce.Code, "", err, true
		case errors.Is(err, errClientMessage):
			return websocket.CloseUnsupportedData, "this stream takes no messages", err, true
		}
		return 0, "", err, true
	case <-ctx.Done():
		return websocket.CloseGoingAway, "agent stopping", ctx.Err(), true
	}
	return 0, "", nil, false
}

func (c *wsConn) control(kind int, payload []byte) error {
	return c.conn.WriteControl(kind, payload, time.Now().Add(c.cfg.WriteWait))
}

// close sends a close frame and waits, for at most CloseWait, for the
// client's answer or the end of the connection.
func (c *wsConn) close(code int, reason string) {
	if err := c.control(websocket.CloseMessage, websocket.FormatCloseMessage(code, truncate(reason, 123))); err != nil || c.readEnded {
		return
	}
	t := time.NewTimer(c.cfg.CloseWait)
	defer t.Stop()
	select {
	case <-c.readDone:
	case <-t.C:
	}
}

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
