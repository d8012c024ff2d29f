package agentd

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestInputHandler checks the agent's TTY input route refuses bad
// messages with a 4xx that names the problem; a good one for a step that
// does not run here is 404.
func TestInputHandler(t *testing.T) {
	cfg := DefaultAgentConfig()
	cfg.Node, cfg.Address = "n1", netip.MustParseAddrPort("127.0.0.1:1")
	agent, err := NewAgent(cfg, nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := inputHandler(agent)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/steps/{id}/input", h)
	for _, tt := range []struct {
		id, body string
		status   int
		want     string
	}{
		{"s-1", `{"type":"stdin","data":"ls\r"}`, 404, "not running on this node"},
		{"s-1", `{"type":"resize","cols":80,"rows":24}`, 404, "not running"},
		{"S!", `{"type":"stdin","data":"x"}`, 400, "step id"},
		{"s-1", `{"type":"stdin","data":`, 400, "input message"},
		{"s-1", `{"type":"paste","data":"x"}`, 400, "paste"},
		{"s-1", `{"type":"stdin","data":"x","bogus":1}`, 400, "bogus"},
		{"s-1", `{"type":"resize","cols":0,"rows":24}`, 400, "0x24"},
		{"s-1", `{"type":"stdin","data":"x"} {}`, 400, "after the JSON object"},
		{"s-1", `{"type":"stdin","data":"` + strings.Repeat("x", 70<<10) + `"}`, 400, "too large"},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/steps/"+tt.id+"/input", strings.NewReader(tt.body)))
		if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("POST %s %.60q = %d %s; want %d naming %q", tt.id, tt.body, rec.Code, rec.Body.String(), tt.status, tt.want)
		}
	}
}
