package client

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
)

// deadURL returns the URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return "http://" + l.Addr().String()
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write([]byte(`{"error":{"code":"` + code + `","message":"` + msg + `"}}`))
}

func TestNewAddresses(t *testing.T) {
	c, err := New(" 127.0.0.1:7100, http://10.0.0.2:7100/ ,", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.URLs(), []string{"http://127.0.0.1:7100", "http://10.0.0.2:7100"}; !cmp.Equal(got, want) {
		t.Errorf("URLs() = %v, want %v", got, want)
	}
	for _, bad := range []string{"", ",", "ftp://x:1", "http://"} {
		if _, err := New(bad, Options{}); err == nil {
			t.Errorf("New(%q) = nil error, want one", bad)
		}
	}
}

// TestRetryAcrossMembers: a dead member and a member without a leader are
// skipped; the answer comes from the one that can.
func TestRetryAcrossMembers(t *testing.T) {
	var noLeaderCalls atomic.Int32
	noLeader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noLeaderCalls.Add(1)
		apiError(w, 503, api.CodeNoLeader, "no leader")
	}))
	defer noLeader.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(IndexHeader, "7")
		if r.Method == "POST" {
			w.WriteHeader(201)
		}
		w.Write([]byte(`{"id":"s-1","state":"queued"}`))
	}))
	defer good.Close()

	c, err := New(deadURL(t)+","+noLeader.URL+","+good.URL, Options{RetryFor: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.SubmitStep(t.Context(), api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 1 << 30})
	if err != nil || s.ID != "s-1" {
		t.Fatalf("SubmitStep() = %+v, %v; want s-1", s, err)
	}
	if noLeaderCalls.Load() != 1 {
		t.Errorf("the member without a leader was asked %d times, want 1", noLeaderCalls.Load())
	}
	// The next request starts at the member that answered.
	if _, err := c.Step(t.Context(), "s-1"); err != nil {
		t.Fatal(err)
	}
	if noLeaderCalls.Load() != 1 {
		t.Errorf("the next request went to the member without a leader again")
	}
}

func TestErrorDecoding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/steps/nope":
			apiError(w, 404, api.CodeNotFound, "step nope: not found")
		case "/v1/steps":
			w.Header().Set("Retry-After", "5")
			apiError(w, 503, api.CodeCapacityExhausted, "no room")
		default:
			http.Error(w, "plain failure", 500)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Step(t.Context(), "nope")
	var e *Error
	if !errors.As(err, &e) || !cmp.Equal(*e, Error{Status: 404, Code: api.CodeNotFound, Message: "step nope: not found"}) || !IsNotFound(err) {
		t.Errorf("Step(nope) = %#v, want a 404 not_found *Error", err)
	}
	_, err = c.SubmitStep(t.Context(), api.StepRequest{})
	if !errors.As(err, &e) || e.Code != api.CodeCapacityExhausted || e.RetryAfter != 5*time.Second {
		t.Errorf("SubmitStep() = %#v, want capacity_exhausted with a 5s retry hint", err)
	}
	_, err = c.Nodes(t.Context())
	if !errors.As(err, &e) || e.Status != 500 || e.Code != api.CodeInternal || e.Message != "plain failure" {
		t.Errorf("Nodes() = %#v, want a 500 internal with the body as message", err)
	}
}

// TestSubmitWithoutIDNotRetried: a submission that may have reached the
// leader is not sent again (it could queue the step twice).
func TestSubmitWithoutIDNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		apiError(w, 502, api.CodeUnavailable, "forward to the leader: connection reset")
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitStep(t.Context(), api.StepRequest{}); !IsCode(err, api.CodeUnavailable) || calls.Load() != 1 {
		t.Errorf("SubmitStep() = %v after %d calls, want unavailable after 1", err, calls.Load())
	}
	calls.Store(0)
	if _, err := c.SubmitStep(t.Context(), api.StepRequest{ID: "mine"}); !IsCode(err, api.CodeUnavailable) || calls.Load() < 2 {
		t.Errorf("SubmitStep(id) = %v after %d calls, want retries", err, calls.Load())
	}
}
