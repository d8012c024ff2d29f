package scheduler

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// The platform routes tell agents what their sandboxes must never reach
// (SPEC, "Sandboxes never reach the control plane"):
//
//	GET /v1/agent/platform      every member, node and gateway address (role agent)
//	PUT /v1/gateways/{name}     a gateway records its own addresses (role gateway, name = the certificate's)
//
// Who may call them is accessTable's to decide (authz.go); these handlers
// only check what is sent.

// platformRoutes adds the platform routes to mux.
func (s *Server) platformRoutes(mux *router) {
	mux.HandleFunc("GET /v1/agent/platform", s.read(s.handlePlatform))
	mux.HandleFunc("PUT /v1/gateways/{name}", s.write(s.handlePutGateway))
}

// resolveTimeout bounds the lookup of a member host name for a platform
// answer.
const resolveTimeout = 2 * time.Second

func (s *Server) handlePlatform(w http.ResponseWriter, r *http.Request) error {
	resolve := func(host string) []netip.Addr {
		ctx, cancel := context.WithTimeout(r.Context(), resolveTimeout)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			s.logger.Debug("resolve member host for the platform list", "host", host, "error", err)
		}
		return addrs
	}
	p, _ := s.fsm.State().platform(s.now(), resolve)
	writeIndexed(w, http.StatusOK, p.Index, p)
	return nil
}

// gatewayRequest is the body of PUT /v1/gateways/{name}.
type gatewayRequest struct {
	Addresses []netip.Addr `json:"addresses"`
}

// maxGatewayBody bounds the body of PUT /v1/gateways/{name}: 16 addresses
// fit many times over.
const maxGatewayBody = 4 << 10

func (s *Server) handlePutGateway(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := cluster.ValidateName("gateway name", name); err != nil {
		return badRequest("%v", err)
	}
	var req gatewayRequest
	if err := decodeBody(w, r, &req, maxGatewayBody, false); err != nil {
		return err
	}
	if err := cluster.ValidateGatewayAddrs(req.Addresses); err != nil {
		return badRequest("field \"addresses\": %v", err)
	}
	c := cluster.SetGateway{Name: name, Addresses: req.Addresses, At: s.now()}
	if _, err := s.raft.Apply(r.Context(), c); err != nil {
		return err
	}
	st := s.fsm.State()
	for _, g := range st.Gateways(c.At) {
		if g.Name == name {
			writeIndexed(w, http.StatusOK, st.Index(), g)
			return nil
		}
	}
	return notFound("gateway %s: its record is gone", name)
}
