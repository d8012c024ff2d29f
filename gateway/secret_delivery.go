package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/httpapi"
	"github.com/rodon-compute/rodon/internal/pki"
)

// The cluster listener (Config.ClusterListen): mutual TLS with the
// cluster CA only, one route, POST /v1/agent/secrets, for the agents of
// the nodes. An agent presents a step's ticket (secret_ticket.go) just
// before the step starts and gets the values of its secrets, once. Every
// refusal is 403 (who asks may not have them) or 404 (no such ticket: used,
// expired or never issued), logged with the step and the caller, never
// the ticket.

// maxDeliveryBody bounds a delivery request.
const maxDeliveryBody = 4 << 10

// clusterHandler is the cluster listener's handler.
func (g *Gateway) clusterHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/agent/secrets", g.handleSecretsDelivery)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			httpapi.NoRoute(mux, w, r, "docs/PROTOCOL.md")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// serveCluster serves the cluster listener on ln (closed when it returns)
// with cfg.ClusterTLS until ctx ends, then shuts it down.
func (g *Gateway) serveCluster(ctx context.Context, ln net.Listener) error {
	ln = tls.NewListener(ln, g.cfg.ClusterTLS)
	srv := &http.Server{
		Handler:           g.clusterHandler(),
		ReadHeaderTimeout: g.cfg.Timeouts.ReadHeader,
		ReadTimeout:       g.cfg.Timeouts.Read,
		WriteTimeout:      g.cfg.Timeouts.Write,
		IdleTimeout:       g.cfg.Timeouts.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	g.log.Info("gateway cluster listener serving", "address", ln.Addr().String(), "url", g.cfg.ClusterURL)
	done := make(chan struct{})
	go func() {
		// Owned here: ends when ctx does, and serveCluster waits for it.
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
	err := srv.Serve(ln)
	<-done
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the cluster listener: %w", err)
	}
	return nil
}

// handleSecretsDelivery answers POST /v1/agent/secrets.
func (g *Gateway) handleSecretsDelivery(w http.ResponseWriter, r *http.Request) {
	id, ok := pki.PeerIdentity(r.TLS)
	var req api.SecretsDeliveryRequest
	values, err := g.deliverSecrets(r.Context(), id, ok, w, r, &req)
	if err != nil {
		he, internal := asHTTPError(err)
		log := g.log.Warn
		if internal {
			log = g.log.Error
		}
		log("secrets delivery refused", "identity", id.String(), "step", req.Step, "attempt", req.Attempt, "status", he.Status, "error", err)
		writeError(w, he)
		return
	}
	writeJSON(w, http.StatusOK, api.SecretsDeliveryAnswer{Values: values})
	clear(values)
}

// deliverSecrets checks a delivery request of identity id (ok: a verified
// client certificate) and returns the values, deleting the ticket.
func (g *Gateway) deliverSecrets(ctx context.Context, id pki.Identity, ok bool, w http.ResponseWriter, r *http.Request, req *api.SecretsDeliveryRequest) (map[string]string, error) {
	if !ok {
		return nil, forbidden("a client without a cluster certificate may not fetch secrets")
	}
	if id.Role != pki.RoleAgent {
		return nil, forbidden("identity %s may not fetch secrets: only the agent of the node that runs a step (role agent) may", id)
	}
	if err := decodeBodyMax(w, r, req, maxDeliveryBody); err != nil {
		return nil, err
	}
	switch {
	case cluster.ValidateStepID(cluster.StepID(req.Step)) != nil:
		return nil, badRequest("field \"step\": want the id of the step the ticket is for")
	case req.Attempt < 1:
		return nil, badRequest("field \"attempt\": want the step's attempt, 1 or more")
	case req.Ticket == "" || len(req.Ticket) > cluster.MaxTicketBytes:
		return nil, badRequest("field \"ticket\": want the ticket of the step's assignment")
	}
	digest := ticketDigest(req.Ticket)
	var t secretTicketRecord
	version, err := getRecord(ctx, g.store, kindSecretTicket, digest, &t)
	if IsNotFound(err) {
		return nil, notFound("no such secrets ticket: it was used already, expired or never issued; a step's secrets are delivered once, to its first attempt")
	} else if err != nil {
		return nil, err
	}
	if !g.now().Before(t.ExpiresAt) {
		if err := g.store.DeleteRecord(ctx, kindSecretTicket, digest, version); err != nil && !IsNotFound(err) && !IsConflict(err) {
			g.log.Warn("delete an expired secrets ticket", "step", t.Step, "error", err)
		}
		return nil, notFound("the secrets ticket of step %s expired at %s: its step did not start in time", t.Step, t.ExpiresAt.Format(time.RFC3339))
	}
	if t.Step != req.Step || t.Attempt != req.Attempt {
		return nil, forbidden("the ticket is for attempt %d of step %s, not attempt %d of step %s", t.Attempt, t.Step, req.Attempt, req.Step)
	}
	st, err := g.steps.Step(ctx, t.Step)
	if IsNotFound(err) {
		return nil, notFound("step %s: not found", t.Step)
	} else if err != nil {
		return nil, err
	}
	if st.Node != id.Name || st.Attempts != t.Attempt {
		return nil, forbidden("identity %s may not fetch the secrets of step %s: its attempt %d runs on node %q", id, t.Step, st.Attempts, st.Node)
	}
	// Single use: the ticket is deleted by compare-and-set before any
	// value is opened; a racing second use loses.
	if err := g.store.DeleteRecord(ctx, kindSecretTicket, digest, version); IsNotFound(err) || IsConflict(err) {
		return nil, notFound("no such secrets ticket: it was used already")
	} else if err != nil {
		return nil, err
	}
	values, err := g.secretValues(withTenant(ctx, t.Tenant), t.Names)
	if err != nil {
		return nil, notFound("the secrets of step %s cannot be opened: %v", t.Step, err)
	}
	g.log.Info("secrets delivered", "step", t.Step, "attempt", t.Attempt, "node", id.Name, "tenant", t.Tenant, "names", t.Names)
	return values, nil
}
