package scheduler

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/cluster"
)

// Pagination of the list routes (docs/PROTOCOL.md, "Pagination"): a list
// is a JSON array of at most ?limit= entries (default 100, at most 1000),
// starting at ?cursor=; the cursor of the next page is in the answer's
// X-Next-Cursor header, absent on the last page. A cursor is opaque to
// clients: the route's letter and the key of the entry the next page
// starts at, in unpadded base64url.

// NextCursorHeader carries the cursor of a list's next page.
const NextCursorHeader = "X-Next-Cursor"

// Limits of a page.
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
)

// Cursor kinds, one per list route.
const (
	cursorSteps   = 's'
	cursorRecords = 'r'
	cursorNodes   = 'n'
	cursorMembers = 'm'
	cursorAudit   = 'a'
)

// page is the ?limit= and ?cursor= of a list request.
type page struct {
	limit int
	// key is the decoded cursor, empty for the first page.
	key string
}

// pageOf parses the page parameters of r for a list whose cursors are of
// kind; errors are 400s naming the parameter.
func pageOf(r *http.Request, kind byte) (page, error) {
	q := r.URL.Query()
	p := page{limit: defaultPageLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, badRequest("query parameter limit %q: want 1 to %d entries (default %d)", v, maxPageLimit, defaultPageLimit)
		}
		p.limit = min(n, maxPageLimit)
	}
	if v := q.Get("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) < 2 || b[0] != kind || b[1] != ':' {
			return p, badRequest("query parameter cursor %q: not a cursor of this list: pass the %s header of the previous page", v, NextCursorHeader)
		}
		p.key = string(b[2:])
	}
	return p, nil
}

// encodeCursor returns the cursor of a next page that starts at key.
func encodeCursor(kind byte, key string) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{kind, ':'}, key...))
}

// setNext sets the next page's cursor, if there is a next page.
func setNext(w http.ResponseWriter, kind byte, key string, more bool) {
	if more {
		w.Header().Set(NextCursorHeader, encodeCursor(kind, key))
	}
}

// stepCursor decodes the key of a steps cursor: "CREATEINDEX/ID".
func stepCursor(key string) (StepCursor, error) {
	if key == "" {
		return StepCursor{}, nil
	}
	idx, id, ok := strings.Cut(key, "/")
	n, err := strconv.ParseUint(idx, 10, 64)
	if !ok || err != nil {
		return StepCursor{}, badRequest("query parameter cursor: not a cursor of this list: pass the %s header of the previous page", NextCursorHeader)
	}
	return StepCursor{CreateIndex: n, ID: cluster.StepID(id)}, nil
}

func stepCursorKey(c StepCursor) string {
	return strconv.FormatUint(c.CreateIndex, 10) + "/" + string(c.ID)
}
