package raftlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
)

func TestAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l = l.Named("raft").With("node", "a").Named("net")
	l.Trace("dropped")
	l.Info("hello", "k", 1, "pct", hclog.Fmt("%0.1f%%", 12.34))
	l.StandardLogger(nil).Print("[WARN] careful")

	var got []map[string]any
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		delete(m, "time")
		got = append(got, m)
	}
	want := []map[string]any{
		{"level": "INFO", "msg": "hello", "node": "a", "logger": "raft.net", "k": float64(1), "pct": "12.3%"},
		{"level": "WARN", "msg": "careful", "node": "a", "logger": "raft.net"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if l.GetLevel() != hclog.Debug || l.IsTrace() || !l.IsDebug() {
		t.Errorf("GetLevel() = %v, want debug", l.GetLevel())
	}
	if got, want := l.Name(), "raft.net"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
}
