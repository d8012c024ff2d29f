package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// join asks the members in cfg.Join, in turn, to add this member as a
// voter, until one accepts (any member forwards the request to the leader)
// or ctx ends. Joining a cluster this member already belongs to is a
// no-op, so a restarted member joins again harmlessly.
func (s *Server) join(ctx context.Context) {
	body, _ := json.Marshal(api.JoinRequest{ID: s.cfg.ID, RaftAddress: s.cfg.RaftAddr, HTTPAddress: s.cfg.HTTPAddr, Version: cluster.MemberVersion})
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		for _, addr := range s.cfg.Join {
			err := s.joinVia(ctx, addr, body)
			if err == nil {
				s.logger.Info("joined the cluster", "via", addr)
				return
			}
			if ctx.Err() != nil {
				return
			}
			level := s.logger.Debug
			if attempt%10 == 0 {
				level = s.logger.Warn
			}
			level("join failed; retrying", "via", addr, "attempt", attempt, "error", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// joinVia sends the join request to the member at addr.
func (s *Server) joinVia(ctx context.Context, addr string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.memberURL(addr)+"/v1/members/join", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.fwd.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		if json.Unmarshal(b, &e) == nil && e.Detail.Code != "" {
			return fmt.Errorf("%s: %w", resp.Status, e)
		}
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}
