package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		retry time.Duration
		want  string
	}{{0, ""}, {time.Second, "1"}, {1500 * time.Millisecond, "2"}, {10 * time.Millisecond, "1"}} {
		w := httptest.NewRecorder()
		WriteError(w, &Error{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "slow down", RetryAfter: tc.retry})
		if got := w.Header().Get("Retry-After"); got != tc.want {
			t.Errorf("RetryAfter %v: Retry-After %q, want %q", tc.retry, got, tc.want)
		}
		var doc api.Error
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusTooManyRequests || doc.Detail.Code != "rate_limited" || doc.Detail.Message != "slow down" {
			t.Errorf("got %d %+v, want 429 rate_limited: slow down", w.Code, doc)
		}
		if got := w.Header().Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type %q", got)
		}
	}
}

func TestNoRoute(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/things", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /v1/things", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) { NoRoute(mux, w, r, "docs/X.md") })

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodDelete, "/v1/things", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, POST" {
		t.Errorf("DELETE /v1/things: %d, Allow %q; want 405, Allow GET, POST", w.Code, w.Header().Get("Allow"))
	}
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/nothing", nil))
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "docs/X.md") {
		t.Errorf("GET /v1/nothing: %d %s; want 404 naming docs/X.md", w.Code, w.Body)
	}
}

func TestDecode(t *testing.T) {
	var v struct {
		A int `json:"a"`
	}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"a": 1, "b": 2}`))
	err := Decode(httptest.NewRecorder(), r, &v, 100, false, "docs/X.md")
	if e, ok := err.(*Error); !ok || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, `"b"`) {
		t.Errorf("unknown field: got %v, want a 400 naming \"b\"", err)
	}
	r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"a": 1}`+strings.Repeat(" ", 200)))
	err = Decode(httptest.NewRecorder(), r, &v, 100, false, "docs/X.md")
	if e, ok := err.(*Error); !ok || e.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("over the limit: got %v, want a 413", err)
	}
}
