package gateway

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// Every list route is paginated (docs/GATEWAY.md, "Lists"): ?limit=N
// (default 100, at most 1000) and ?cursor=C; the answer is still a JSON
// array, and the cursor of the next page is in the X-Next-Cursor header,
// absent on the last page. A page costs the gateway a bounded number of
// store reads whatever the number of records.
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
	nextCursorHeader = "X-Next-Cursor"
	// maxCursorLen bounds the cursor parameter.
	maxCursorLen = 1024
	// scanBudget is how many records one page of a filtered list may read
	// at most: a page may then hold fewer than limit entries (even none)
	// and still have a next cursor.
	scanBudget = 1000
)

// pageReq is a list request's page: its limit, and where it starts.
type pageReq struct {
	limit int
	at    position
}

// position is where a page starts in a list read from the store: at the
// store's cursor store ("" for the first page), skipping the records up
// to and including id after (the last one the page before showed, when
// it ended in the middle of what one store read returned). Records are
// listed in id order, so skipping by id holds whatever was created or
// deleted in between.
type position struct {
	store, after string
}

// parsePage reads limit and cursor. list names the list the cursor must
// come from ("runs", "members", ...): a cursor of another list is refused.
func parsePage(q url.Values, list string) (pageReq, error) {
	pg := pageReq{limit: defaultPageLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageLimit {
			return pg, badRequest("query parameter limit %q: want 1 to %d (default %d)", truncateText(s, 20), maxPageLimit, defaultPageLimit)
		}
		pg.limit = n
	}
	if s := q.Get("cursor"); s != "" {
		at, ok := decodeCursor(list, s)
		if !ok {
			return pg, badRequest("query parameter cursor: not a cursor of %s; pass the %s header of the previous page", list, nextCursorHeader)
		}
		pg.at = at
	}
	return pg, nil
}

// encodeCursor makes the client's cursor of list at position at; the
// zero position (the end of the list) is "".
func encodeCursor(list string, at position) string {
	if at == (position{}) {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(list + "\x00" + at.store + "\x00" + at.after))
}

func decodeCursor(list, s string) (position, bool) {
	if len(s) > maxCursorLen {
		return position{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return position{}, false
	}
	parts := strings.Split(string(b), "\x00")
	if len(parts) != 3 || parts[0] != list || parts[1] == "" && parts[2] == "" {
		return position{}, false
	}
	return position{store: parts[1], after: parts[2]}, true
}

// page writes items as the answer, with the cursor of the page at next.
func (c *call) page(list string, items any, next position) error {
	if cur := encodeCursor(list, next); cur != "" {
		c.w.Header().Set(nextCursorHeader, cur)
	}
	return c.json(http.StatusOK, items)
}

// scanRecords reads records of kind whose id starts with prefix from
// position at, a chunk at a time, and hands each to take until take says
// the page is full, the records end, or scanBudget records were read. It
// returns the position after the last record taken ({} at the end).
func scanRecords(ctx context.Context, s Store, kind, prefix string, pg pageReq, take func([]api.Record) (used int, full bool, err error)) (position, error) {
	at, read := pg.at, 0
	budget := max(pg.limit, scanBudget)
	// The first read asks for the page's limit (all a page without a
	// filter needs); each next one, which only a filter makes necessary,
	// for four times more.
	n := pg.limit
	for read < budget {
		n = min(n, maxPageLimit, budget-read)
		recs, next, err := s.ListRecordsPage(ctx, kind, prefix, n, at.store)
		n *= 4
		if err != nil {
			return position{}, err
		}
		read += len(recs)
		if at.after != "" {
			i := 0
			for i < len(recs) && recs[i].ID <= at.after {
				i++
			}
			recs = recs[i:]
		}
		used, full, err := take(recs)
		if err != nil {
			return position{}, err
		}
		end := next == "" || next == at.store || len(recs) == 0 && at.after == ""
		switch {
		case full && used < len(recs):
			// Full in the middle of the chunk: start there next time.
			return position{store: at.store, after: recs[used-1].ID}, nil
		case end:
			return position{}, nil
		case full:
			return position{store: next}, nil
		}
		at = position{store: next}
	}
	return at, nil
}

// scanPage reads one page of a list: records of kind whose id starts with
// prefix, from pg's position, keeping those keep accepts (nil keeps all),
// until pg.limit are kept, the records end, or scanBudget records were
// read (a filtered page may then hold fewer than limit, even none, and
// still have a next position).
func scanPage[T any](ctx context.Context, s Store, kind, prefix string, pg pageReq, keep func(*versioned[T]) bool) ([]versioned[T], position, error) {
	var out []versioned[T]
	next, err := scanRecords(ctx, s, kind, prefix, pg, func(recs []api.Record) (int, bool, error) {
		vs, err := decodeRecords[T](kind, recs)
		if err != nil {
			return 0, false, err
		}
		for i := range vs {
			if keep == nil || keep(&vs[i]) {
				out = append(out, vs[i])
				if len(out) == pg.limit {
					return i + 1, true, nil
				}
			}
		}
		return len(vs), false, nil
	})
	return out, next, err
}

// truncateText shortens s to n bytes for an error message.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
