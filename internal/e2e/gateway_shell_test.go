package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestGatewayShell opens an interactive (tty) step through the gateway, as
// the page's "open shell" button does, types into it and resizes it over
// the websocket, and reads the answers from its output.
func TestGatewayShell(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "shell-node-a1")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	c := newGWClient(t, g, &recorder{})
	c.signIn(ownerEmail, g.ownerPassword(t, ownerEmail))
	var ws struct {
		ID string `json:"id"`
	}
	c.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "shell"}, &ws)
	op := c.startRun(ws.ID, map[string]any{"image": "base", "cpu": 0.5, "memory": "128Mi", "tty": true,
		"args": []string{"/bin/bash", "--norc", "--noprofile"}})
	id := op.Steps[0].ID

	s := c.openStream(id, 0)
	s.conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	var out strings.Builder
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			fr, err := s.next()
			if err != nil {
				t.Fatalf("stream ended before %q appeared: %v\noutput so far: %q", want, err, out.String())
			}
			if fr.Kind == api.KindStdout || fr.Kind == api.KindStderr {
				b, err := fr.Output()
				if err != nil {
					t.Fatal(err)
				}
				out.Write(b)
			}
		}
	}
	send := func(msg map[string]any) {
		t.Helper()
		if err := s.conn.WriteJSON(msg); err != nil {
			t.Fatalf("send %v: %v", msg, err)
		}
	}
	send(map[string]any{"type": "resize", "cols": 101, "rows": 37})
	send(map[string]any{"type": "stdin", "data": "stty size; echo shell-says-$((6*7))\r"})
	readUntil("shell-says-42")
	if !strings.Contains(out.String(), "37 101") {
		t.Errorf("stty size after resizing to 101x37: output %q", out.String())
	}
	send(map[string]any{"type": "stdin", "data": "exit 5\r"})
	for {
		fr, err := s.next()
		if err != nil {
			t.Fatalf("stream ended without an exit frame: %v", err)
		}
		if fr.Kind == api.KindExit {
			var x api.Exit
			if err := json.Unmarshal(fr.Data, &x); err != nil || x.ExitCode == nil || *x.ExitCode != 5 {
				t.Errorf("exit frame %s, want exit code 5", fr.Data)
			}
			break
		}
	}
	// After the exit frame the server closes normally.
	if _, _, err := s.conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after the exit frame: %v, want a normal close", err)
	}
	c.waitRun(op.ID, time.Minute)
}
