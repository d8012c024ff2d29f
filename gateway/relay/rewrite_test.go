package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
)

// TestRelayRewrite: Config.Rewrite sees every event and exit frame, and no
// output frame; what it returns is what the browser gets.
func TestRelayRewrite(t *testing.T) {
	var mu sync.Mutex
	var seen []api.FrameKind
	e := newEnv(t, envOptions{edit: func(c *Config) {
		c.Rewrite = func(_ context.Context, line []byte) []byte {
			var f api.Frame
			if err := json.Unmarshal(line, &f); err != nil {
				t.Errorf("Rewrite(%s): %v", line, err)
				return line
			}
			mu.Lock()
			seen = append(seen, f.Kind)
			mu.Unlock()
			return bytes.ReplaceAll(line, []byte("event"), []byte("EVENT"))
		}
	}})
	lg := e.create("rw")
	lines(t, lg, 0, 10) // 10 lines and 2 events
	exit(t, lg, 0)
	got, ce := readAll(t, dial(t, e.wsURL("rw", "")))
	if ce.Code != websocket.CloseNormalClosure {
		t.Errorf("close = %v, want %d", ce, websocket.CloseNormalClosure)
	}
	want := e.raw("rw", 0)
	if len(got) != len(want) {
		t.Fatalf("got %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		var f api.Frame
		if err := json.Unmarshal(want[i], &f); err != nil {
			t.Fatal(err)
		}
		w := want[i]
		if f.Kind == api.KindEvent || f.Kind == api.KindExit {
			w = bytes.ReplaceAll(w, []byte("event"), []byte("EVENT"))
		}
		if !bytes.Equal(got[i], w) {
			t.Errorf("frame %d = %s, want %s", i+1, got[i], w)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != api.KindEvent || seen[1] != api.KindEvent || seen[2] != api.KindExit {
		t.Errorf("Rewrite saw %v, want event, event, exit", seen)
	}
}
