package stream

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
)

var newline = []byte{'\n'}

// serveNDJSON writes the frames of rd as JSON lines. Output is flushed
// whenever the stream has caught up with the log, so a frame reaches the
// client as soon as it is written. Each write must be taken by the client
// within Config.WriteWait, so a client that stops reading is given up
// rather than holding the stream for ever. The response ends cleanly only after the
// last frame; if the log cannot be read to its end the connection is
// aborted, so that a client never mistakes a broken stream for a complete
// one.
func (h *Handler) serveNDJSON(w http.ResponseWriter, r *http.Request, id cluster.StepID, rd *logstore.Reader) {
	defer rd.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	ctx := r.Context()
	dirty := true // the header
	var frames int
	for {
		b, wait, err := rd.TryNext()
		if b != nil {
			// An error means the connection takes no deadline; the write
			// goes on without one.
			rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteWait))
			_, err := w.Write(b)
			if err == nil {
				_, err = w.Write(newline)
			}
			if err != nil {
				h.logger.Debug("stream client gone", "step", id, "mode", "ndjson", "frames", frames, "error", err)
				return
			}
			frames++
			dirty = true
			continue
		}
		if dirty {
			rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteWait))
			if err := rc.Flush(); err != nil {
				h.logger.Debug("stream client gone", "step", id, "mode", "ndjson", "frames", frames, "error", err)
				return
			}
			dirty = false
		}
		switch {
		case errors.Is(err, io.EOF):
			h.logger.Debug("stream ended", "step", id, "mode", "ndjson", "frames", frames)
			return
		case err != nil:
			h.logger.Warn("stream broken", "step", id, "mode", "ndjson", "frames", frames, "error", err)
			panic(http.ErrAbortHandler)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return
		}
	}
}
