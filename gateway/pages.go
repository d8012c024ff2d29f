package gateway

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// pageReq is a list request's page: its limit, and the store's cursor the
// client's cursor stands for ("" for the first page).
type pageReq struct {
	limit  int
	cursor string
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
		c, ok := decodeCursor(list, s)
		if !ok {
			return pg, badRequest("query parameter cursor: not a cursor of %s; pass the %s header of the previous page", list, nextCursorHeader)
		}
		pg.cursor = c
	}
	return pg, nil
}

// encodeCursor makes the client's cursor of list from the store's.
func encodeCursor(list, store string) string {
	if store == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(list + "\x00" + store))
}

func decodeCursor(list, s string) (string, bool) {
	if len(s) > maxCursorLen {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", false
	}
	store, ok := strings.CutPrefix(string(b), list+"\x00")
	return store, ok && store != ""
}

// page writes items as the answer, with the next page's cursor.
func (c *call) page(list string, items any, next string) error {
	if next != "" {
		c.w.Header().Set(nextCursorHeader, encodeCursor(list, next))
	}
	return c.json(http.StatusOK, items)
}

// scanPage reads one page of a list: records of kind whose id starts with
// prefix, after pg's cursor, keeping those keep accepts, until pg.limit
// are kept, the records end, or scanBudget records were read. Each read
// asks the store for no more records than may still be kept, so the
// store's next cursor is exactly after the last record looked at; next is
// "" once the records end.
func scanPage[T any](ctx context.Context, s Store, kind, prefix string, pg pageReq, keep func(*versioned[T]) bool) ([]versioned[T], string, error) {
	var out []versioned[T]
	cursor, read := pg.cursor, 0
	budget := max(pg.limit, scanBudget)
	for len(out) < pg.limit && read < budget {
		n := min(pg.limit-len(out), budget-read)
		recs, next, err := s.ListRecordsPage(ctx, kind, prefix, n, cursor)
		if err != nil {
			return nil, "", err
		}
		read += len(recs)
		vs, err := decodeRecords[T](kind, recs)
		if err != nil {
			return nil, "", err
		}
		for i := range vs {
			if keep == nil || keep(&vs[i]) {
				out = append(out, vs[i])
			}
		}
		if next == "" || next == cursor || len(recs) == 0 {
			return out, "", nil
		}
		cursor = next
	}
	return out, cursor, nil
}

// truncateText shortens s to n bytes for an error message.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
