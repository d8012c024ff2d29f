package scheduler

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/rodon-compute/rodon/internal/httpapi"
)

// maxBody is the largest request body accepted, but for a snapshot
// restore (maxSnapshot).
const (
	maxBody     = 1 << 20
	maxSnapshot = 256 << 20
)

// decodeBody decodes the JSON object of r's body into v, strictly: at most
// limit bytes, no field v does not have, nothing after the object. An empty
// body is an error unless optional. The error is a 400 (413 over the limit)
// whose message names the field or the offset at fault.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, limit int64, optional bool) error {
	return httpapi.Decode(w, r, v, limit, optional, "docs/PROTOCOL.md")
}

// decodeJSON is decodeBody's decoder, without the HTTP limit; it is what
// the fuzz tests exercise.
func decodeJSON(r io.Reader, v any, optional bool) error {
	return httpapi.DecodeReader(r, v, optional, "docs/PROTOCOL.md")
}

// queryIndex parses the ?index= and ?wait= parameters of a long poll.
// wait is zero without index; else the asked wait (default defaultWait),
// capped at max.
func queryIndex(r *http.Request, max time.Duration) (index uint64, wait time.Duration, err error) {
	q := r.URL.Query()
	if s := q.Get("index"); s != "" {
		index, err = strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, badRequest("query parameter index %q: want a non-negative integer", s)
		}
		wait = defaultWait
	}
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, 0, badRequest("query parameter wait %q: want a non-negative duration such as \"30s\"", s)
		}
		wait = d
	}
	if q.Get("index") == "" {
		wait = 0
	}
	return index, min(wait, max), nil
}
