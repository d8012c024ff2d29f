package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// handleHealth answers 200 while the member serves, with its Raft view;
// Status says whether it knows a leader. With ?read-index the member first
// confirms its leadership with a quorum (503 if it cannot), so that the
// commit index it reports bounds every acknowledged write: followers use
// it to serve linearizable reads.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	var commit uint64
	if _, ok := r.URL.Query()["read-index"]; ok {
		commit = s.raft.CommitIndex()
		if err := s.raft.VerifyLeader(r.Context()); err != nil {
			writeError(w, errorOf(err))
			return
		}
	}
	leader, _ := s.raft.Leader()
	h := api.Health{
		Status:       "ok",
		ID:           s.cfg.ID,
		RaftState:    strings.ToLower(s.raft.RaftState()),
		Leader:       leader,
		CommitIndex:  max(commit, s.raft.CommitIndex()),
		AppliedIndex: s.raft.AppliedIndex(),
		StateIndex:   s.fsm.State().Index(),
	}
	if leader == "" {
		h.Status = api.CodeNoLeader
	}
	writeJSON(w, http.StatusOK, h)
}

// memberHealthTimeout bounds the question GET /v1/members asks each
// member.
const memberHealthTimeout = time.Second

func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r, cursorMembers)
	if err != nil {
		return err
	}
	members, err := s.raft.Members(r.Context())
	if err != nil {
		return err
	}
	// A page of the members by id, before any of them is asked anything.
	slices.SortFunc(members, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	i, _ := slices.BinarySearchFunc(members, p.key, func(m Member, id string) int { return cmp.Compare(m.ID, id) })
	members = members[i:]
	if len(members) > p.limit {
		setNext(w, cursorMembers, members[p.limit].ID, true)
		members = members[:p.limit]
	}
	st := s.fsm.State()
	out := make([]api.Member, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i] = api.Member{ID: m.ID, Address: m.Address, Leader: m.Leader, Voter: m.Voter}
		rec, ok := st.Member(m.ID)
		if ok {
			out[i].HTTPAddress = rec.HTTPAddress
		}
		switch {
		case m.ID == s.cfg.ID:
			out[i].LastIndex = s.raft.AppliedIndex()
		case !ok:
			out[i].Error = "its HTTP address is not recorded yet"
		default:
			wg.Go(func() {
				h, err := s.memberHealth(r.Context(), rec.HTTPAddress)
				if err != nil {
					out[i].Error = err.Error()
					return
				}
				out[i].LastIndex = h.AppliedIndex
			})
		}
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b api.Member) int { return cmp.Compare(a.ID, b.ID) })
	writeIndexed(w, http.StatusOK, st.Index(), out)
	return nil
}

// memberHealth asks the member at addr for its health.
func (s *Server) memberHealth(ctx context.Context, addr string) (api.Health, error) {
	return s.askHealth(ctx, addr, "")
}

// askHealth asks the member at addr for its health, with query q.
func (s *Server) askHealth(ctx context.Context, addr, q string) (api.Health, error) {
	var h api.Health
	ctx, cancel := context.WithTimeout(ctx, memberHealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.memberURL(addr)+"/healthz"+q, nil)
	if err != nil {
		return h, err
	}
	resp, err := s.fwd.Do(req)
	if err != nil {
		return h, fmt.Errorf("unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("health answered %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h, fmt.Errorf("decode health: %w", err)
	}
	return h, nil
}

func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) error {
	var req api.JoinRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return err
	}
	if req.ID == "" {
		return badRequest("field \"id\": missing: want the joining member's --node-id")
	}
	if err := checkHostPort(req.RaftAddress); err != nil {
		return badRequest("field \"raft_address\": %v", err)
	}
	if err := checkHostPort(req.HTTPAddress); err != nil {
		return badRequest("field \"http_address\": %v", err)
	}
	// Record the HTTP address first: once a voter, the member forwards to
	// the leader and others forward to it.
	if _, err := s.raft.Apply(r.Context(), cluster.SetMember{ID: req.ID, RaftAddress: req.RaftAddress,
		HTTPAddress: req.HTTPAddress, Version: req.Version, At: s.now()}); err != nil {
		return err
	}
	if err := s.raft.AddVoter(r.Context(), req.ID, req.RaftAddress); err != nil {
		return err
	}
	s.logger.Info("member joined", "peer", req.ID, "raft_address", req.RaftAddress, "http_address", req.HTTPAddress)
	s.warnLocalStore()
	writeJSON(w, http.StatusOK, api.Member{ID: req.ID, Address: req.RaftAddress, HTTPAddress: req.HTTPAddress, Voter: true})
	return nil
}

func (s *Server) handleRemoveMember(w http.ResponseWriter, r *http.Request) error {
	var req api.RemoveMemberRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return err
	}
	if req.ID == "" {
		return badRequest("field \"id\": missing: want the id of the member to remove")
	}
	members, err := s.raft.Members(r.Context())
	if err != nil {
		return err
	}
	if !slices.Contains(memberIDs(members), req.ID) {
		return notFound("member %s: not found: see GET /v1/members", req.ID)
	}
	if err := s.raft.RemoveServer(r.Context(), req.ID); err != nil {
		return err
	}
	s.logger.Info("member removed", "peer", req.ID)
	// A leader that removed itself no longer leads: the next leader drops
	// the record when it takes office.
	if req.ID != s.cfg.ID {
		if _, err := s.raft.Apply(r.Context(), cluster.RemoveMember{ID: req.ID, At: s.now()}); err != nil {
			s.logger.Warn("drop record of a removed member", "peer", req.ID, "error", err)
		}
	}
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

func memberIDs(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
