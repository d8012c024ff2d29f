package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
)

// The cluster env key travels between members only: a member that joins
// without one asks the member it joins for it (FetchEnvKey), over mutual
// TLS, with its member certificate. No other identity can read it
// (accessTable), and in plaintext mode, where nobody is authenticated, the
// route is refused.

// maxEnvKey bounds the keyset a joining member reads.
const maxEnvKey = 64 << 10

// handleEnvKey serves GET /v1/members/env-key: the env key in its file
// format, to a member.
func (s *Server) handleEnvKey(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.TLS == nil {
		return &httpError{Status: http.StatusForbidden, Code: api.CodeForbidden,
			Message: "the env key is served only over mutual TLS to members; this member runs in plaintext mode"}
	}
	data, err := s.envKey.Export()
	if err != nil {
		return err
	}
	id, _ := pki.PeerIdentity(r.TLS)
	s.logger.Info("env key sent to a member", "peer", id.String(), "primary_key_id", s.envKey.PrimaryID())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(data)
	return nil
}

// FetchEnvKey asks the members at join (HOST:PORT or https URLs, as
// --join) in turn for the cluster env key, presenting src, and returns the
// first answer (Tink JSON keyset; envseal.Save checks and stores it). It
// tries each once within timeout.
func FetchEnvKey(ctx context.Context, src *pki.Source, join []string, timeout time.Duration) ([]byte, error) {
	if src == nil {
		return nil, errors.New("fetch the env key: only over mutual TLS")
	}
	tr := src.Transport(pki.AllowRoles(pki.RoleMember))
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: timeout}
	var errs []error
	for _, addr := range join {
		u := addr
		if !strings.Contains(u, "://") {
			u = "https://" + u
		}
		data, err := fetchEnvKey(ctx, hc, strings.TrimSuffix(u, "/")+"/v1/members/env-key")
		if err == nil {
			return data, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("fetch the env key from the members to join: %w", errors.Join(errs...))
}

func fetchEnvKey(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxEnvKey+1))
	switch {
	case err != nil:
		return nil, err
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	case len(b) > maxEnvKey:
		return nil, fmt.Errorf("answer longer than %d bytes", maxEnvKey)
	}
	return b, nil
}
