package agentd

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// schedulerClient adapts scheduler/client to the agent's Scheduler.
type schedulerClient struct {
	c *client.Client
	// tr is the TLS transport, nil in plaintext mode; close releases its
	// idle connections.
	tr *http.Transport
	// ready, if set, must return nil before assignments are handed to the
	// agent: no step starts before the control-plane list is loaded.
	ready func(ctx context.Context) error
}

// newSchedulerClient returns the agent's client of the scheduler: with src,
// over mutual TLS to servers that are scheduler members.
func newSchedulerClient(urls []string, src *pki.Source) (*schedulerClient, error) {
	opts := client.Options{UserAgent: "rodon-agentd"}
	var tr *http.Transport
	if src != nil {
		tr = src.Transport(pki.AllowRoles(pki.RoleMember))
		opts.HTTPClient = &http.Client{Transport: tr}
	}
	c, err := client.New(joinURLs(urls), opts)
	if err != nil {
		return nil, err
	}
	return &schedulerClient{c: c, tr: tr}, nil
}

func (s *schedulerClient) close() {
	if s.tr != nil {
		s.tr.CloseIdleConnections()
	}
}

func (s *schedulerClient) Platform(ctx context.Context) (cluster.Platform, error) {
	return s.c.Platform(ctx)
}

func joinURLs(urls []string) string {
	s := ""
	for i, u := range urls {
		if i > 0 {
			s += ","
		}
		s += u
	}
	return s
}

// refusedReport marks 4xx answers: the scheduler will not accept the report
// however often it is sent.
func refusedReport(err error) error {
	var e *client.Error
	if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
		return errors.Join(ErrReportRefused, err)
	}
	return err
}

func (s *schedulerClient) Register(ctx context.Context, r cluster.RegisterNode) (cluster.Node, error) {
	return s.c.Register(ctx, r)
}

func (s *schedulerClient) Heartbeat(ctx context.Context, h cluster.Heartbeat) (cluster.HeartbeatResult, error) {
	res, err := s.c.Heartbeat(ctx, h)
	return cluster.HeartbeatResult{Unwanted: res.Unwanted}, err
}

func (s *schedulerClient) Assignments(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (uint64, []cluster.Step, error) {
	if s.ready != nil {
		if err := s.ready(ctx); err != nil {
			return 0, nil, err
		}
	}
	a, err := s.c.Assignments(ctx, node, index, wait)
	return a.Index, a.Steps, err
}

var _ assignmentChanger = (*schedulerClient)(nil)

func (s *schedulerClient) AssignmentChanges(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (uint64, []cluster.Step, []cluster.StepAttempt, bool, error) {
	if s.ready != nil {
		if err := s.ready(ctx); err != nil {
			return 0, nil, nil, false, err
		}
	}
	a, err := s.c.AssignmentChanges(ctx, node, index, wait)
	return a.Index, a.Steps, a.Live, a.Changes, err
}

func (s *schedulerClient) StepPhase(ctx context.Context, p cluster.StepPhase) error {
	return refusedReport(s.c.ReportPhase(ctx, p))
}

func (s *schedulerClient) StepEvents(ctx context.Context, e cluster.StepEvents) error {
	return refusedReport(s.c.ReportEvents(ctx, e))
}

func (s *schedulerClient) StepExit(ctx context.Context, x cluster.StepExit) error {
	return refusedReport(s.c.ReportExit(ctx, x))
}

func (s *schedulerClient) ConfirmCancel(ctx context.Context, c cluster.ConfirmCancel) error {
	return refusedReport(s.c.ConfirmCancel(ctx, c))
}

func (s *schedulerClient) Uploads(ctx context.Context, u cluster.UploadsRequest) (cluster.UploadsResponse, error) {
	res, err := s.c.AgentUploads(ctx, u)
	return res, refusedReport(err)
}

// blobTransport carries presigned blob URLs: the scheduler's own (a local
// store's, /v1/blobs/DIGEST?...&sig=..., served on its mutual-TLS
// listener) with the agent's certificate to a scheduler member, any other
// (an S3 store's) as plain HTTPS with the system's roots.
type blobTransport struct {
	cluster, public http.RoundTripper
}

func (t blobTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasPrefix(req.URL.Path, "/v1/blobs/") && req.URL.Query().Has("sig") {
		return t.cluster.RoundTrip(req)
	}
	return t.public.RoundTrip(req)
}

// blobClient is the agent's client of presigned blob URLs, and the func
// that closes its idle connections; tr is the scheduler client's
// mutual-TLS transport (nil in plaintext mode), which its owner closes.
func blobClient(tr *http.Transport) (*http.Client, func()) {
	public := http.DefaultTransport.(*http.Transport).Clone()
	if tr == nil {
		return &http.Client{Transport: public}, public.CloseIdleConnections
	}
	return &http.Client{Transport: blobTransport{cluster: tr, public: public}}, public.CloseIdleConnections
}
