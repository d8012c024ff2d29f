package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rodon-compute/rodon/internal/envseal"
)

// reloadLoop re-reads the TLS files at every value of cfg.Reload until ctx
// ends (the Source also picks up changed files by itself, at handshakes).
// A failed reload keeps the previous certificate.
func (s *Server) reloadLoop(ctx context.Context) {
	src, logger := s.cfg.TLS, s.logger
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Reload:
		}
		if src == nil {
			logger.Info("SIGHUP: nothing to reload without TLS (--plaintext)")
			continue
		}
		if err := src.Reload(); err != nil {
			logger.Warn("SIGHUP: tls files do not load; keeping the previous certificate", "error", err)
			continue
		}
		logger.Info("SIGHUP: tls files reloaded", "identity", src.Identity().String(), "not_after", src.NotAfter())
	}
}

// EnvKeyFetchFor bounds how long AwaitEnvKey waits for a member that hands
// it the env key.
const EnvKeyFetchFor = 2 * time.Minute

// AwaitEnvKey fetches the cluster env key from the members cfg joins (over
// mutual TLS, as cfg.TLS; see FetchEnvKey), asking again with a backoff
// for up to EnvKeyFetchFor, and keeps it at path (envseal.Save). A member
// joining with TLS and no key file calls it before New.
func AwaitEnvKey(ctx context.Context, cfg Config, path string, logger *slog.Logger) (*envseal.Key, error) {
	ctx, cancel := context.WithTimeout(ctx, EnvKeyFetchFor)
	defer cancel()
	backoff := 250 * time.Millisecond
	for {
		data, err := FetchEnvKey(ctx, cfg.TLS, cfg.Join, 10*time.Second)
		if err == nil {
			k, err := envseal.Save(path, data)
			if err != nil {
				return nil, fmt.Errorf("keep the env key fetched from the cluster: %w", err)
			}
			logger.Info("env key fetched from the cluster", "path", path, "primary_key_id", k.PrimaryID(), "join", cfg.Join)
			return k, nil
		}
		logger.Warn("no env key yet; asking the members to join again", "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no env key at %s, and none fetched from %v within %v: %w", path, cfg.Join, EnvKeyFetchFor, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
