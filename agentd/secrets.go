package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rodon-compute/rodon/internal/secretmask"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// A step's secrets (docs/PROTOCOL.md, "Secrets delivery"): an assignment
// names them and carries a single-use ticket; just before the step's
// sandbox is created, the agent POSTs the ticket to the gateway's cluster
// listener over mutual TLS with this node's agent certificate, and gets
// the values. They go into the step process's environment and nowhere
// else: never a log line, a file of the node or a report; the stepRun
// forgets them when the step ends. A step whose secrets cannot be fetched
// fails with cause secrets_unavailable and never runs without them.

const (
	// secretsTimeout bounds one delivery request.
	secretsTimeout = 10 * time.Second
	// secretsTries bounds the delivery requests of one step; only a
	// request that got no answer, or a 5xx, is tried again.
	secretsTries = 3
	// secretsBackoff is the pause before the first retry, doubled after.
	secretsBackoff = 500 * time.Millisecond
	// maxSecretsAnswer bounds the delivery answer read.
	maxSecretsAnswer = 4 << 20
)

// fetchSecrets fetches the values of sec's secrets for attempt of step id
// from sec.Gateway with hc (the node's agent certificate, accepting only a
// gateway). The map holds exactly sec.Names. Its error is a stepError of
// cause secrets_unavailable whose sentence names no value and no ticket.
func fetchSecrets(ctx context.Context, hc *http.Client, id cluster.StepID, attempt int, sec *cluster.StepSecrets) (map[string]string, error) {
	unavailable := secretsFailure
	switch {
	case sec.Error != "":
		return nil, unavailable(sec.Error, nil)
	case sec.Ticket == "":
		return nil, unavailable("the assignment carries no ticket for them", nil)
	case hc == nil:
		return nil, unavailable("this node has no cluster certificate to fetch them with (agentd runs with --plaintext)", nil)
	}
	body, _ := json.Marshal(api.SecretsDeliveryRequest{Step: string(id), Attempt: attempt, Ticket: sec.Ticket})
	url := strings.TrimSuffix(sec.Gateway, "/") + "/v1/agent/secrets"
	backoff := secretsBackoff
	var lastErr error
	for try := range secretsTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil, unavailable("the node's agent stopped", ctx.Err())
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		values, status, err := postSecrets(ctx, hc, url, body)
		if err == nil {
			for _, n := range sec.Names {
				v, ok := values[n]
				if !ok {
					clear(values)
					return nil, unavailable("the gateway's answer lacks secret "+n, nil)
				}
				if strings.ContainsRune(v, 0) {
					clear(values)
					return nil, unavailable("the value of secret "+n+" holds a NUL byte, which no environment variable can", nil)
				}
			}
			for n := range values {
				if !slices.Contains(sec.Names, n) {
					delete(values, n)
				}
			}
			return values, nil
		}
		lastErr = err
		switch {
		case status == http.StatusNotFound:
			return nil, unavailable("the gateway has no such ticket (it is used once, by the step's first attempt, within 10 minutes of the submission)", err)
		case status == http.StatusForbidden:
			return nil, unavailable("the gateway refused this node", err)
		case status != 0 && status < 500:
			return nil, unavailable(fmt.Sprintf("the gateway answered %d", status), err)
		}
	}
	return nil, unavailable(fmt.Sprintf("the gateway did not answer after %d tries", secretsTries), lastErr)
}

// postSecrets sends one delivery request; status is 0 when no answer came.
// An error holds the gateway's message, never the request's ticket.
func postSecrets(ctx context.Context, hc *http.Client, url string, body []byte) (map[string]string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, secretsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, errors.New("secrets delivery request: bad gateway URL")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		// A *url.Error names the URL only: the ticket is in the body.
		return nil, 0, fmt.Errorf("secrets delivery: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxSecretsAnswer))
	if err != nil {
		return nil, 0, fmt.Errorf("read the secrets delivery answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		_ = json.Unmarshal(b, &e)
		return nil, resp.StatusCode, fmt.Errorf("secrets delivery: gateway answered %d: %s", resp.StatusCode, e.Detail.Message)
	}
	var a api.SecretsDeliveryAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		// Not quoted: the answer holds values.
		clear(b)
		return nil, resp.StatusCode, errors.New("secrets delivery: the gateway's answer is not a delivery answer")
	}
	clear(b)
	if a.Values == nil {
		a.Values = map[string]string{}
	}
	return a.Values, resp.StatusCode, nil
}

// maskOutput returns w, through which the step's stdout or stderr bytes
// go on their way into the output log (and so the stream and every
// reader of it), masking each value and its base64 and hex forms as ***
// (internal/secretmask). Without values it is w itself. The writer it
// returns may hold back the start of a value: close it (it does not close
// w) before the log is finished.
func maskOutput(values []string, w io.Writer) io.Writer {
	if len(values) == 0 {
		return w
	}
	return secretmask.New(values).Writer(w)
}
