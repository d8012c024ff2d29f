package lincheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(in Input, call int64, out Output, ret int64) porcupine.Operation {
	return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
}

func TestModel(t *testing.T) {
	sub := Input{Kind: Submit, Step: "s1"}
	read := Input{Kind: Read, Step: "s1"}
	running, queued, exited := Rank(1, "running"), Rank(1, "queued"), Rank(1, "exited")
	tests := []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"submit then reads forward", []porcupine.Operation{
			op(sub, 0, Output{OK: true}, 10),
			op(read, 20, Output{Found: true, Rank: queued}, 30),
			op(read, 40, Output{Found: true, Rank: running}, 50),
			op(read, 60, Output{Found: true, Rank: exited}, 70),
		}, true},
		{"stale read after a newer one", []porcupine.Operation{
			op(sub, 0, Output{OK: true}, 10),
			op(read, 20, Output{Found: true, Rank: running}, 30),
			op(read, 40, Output{Found: true, Rank: queued}, 50),
		}, false},
		{"read misses a completed submit", []porcupine.Operation{
			op(sub, 0, Output{OK: true}, 10),
			op(read, 20, Output{Found: false}, 30),
		}, false},
		{"read concurrent with submit may miss it", []porcupine.Operation{
			op(sub, 0, Output{OK: true}, 30),
			op(read, 10, Output{Found: false}, 20),
		}, true},
		{"overlapping reads in either order", []porcupine.Operation{
			op(sub, 0, Output{OK: true}, 10),
			op(read, 20, Output{Found: true, Rank: running}, 50),
			op(read, 25, Output{Found: true, Rank: queued}, 45),
		}, true},
		{"unknown submit may apply late", []porcupine.Operation{
			op(sub, 0, Output{Unknown: true}, 1<<62),
			op(read, 20, Output{Found: false}, 30),
			op(read, 40, Output{Found: true, Rank: queued}, 50),
		}, true},
		{"a new attempt ranks above the last", []porcupine.Operation{
			op(sub, 0, Output{OK: true}, 10),
			op(read, 20, Output{Found: true, Rank: Rank(1, "lost")}, 30),
			op(read, 40, Output{Found: true, Rank: Rank(2, "queued")}, 50),
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model, tt.h); got != tt.want {
				t.Errorf("CheckOperations() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	h := NewHistory()
	h.Call(0, Input{Kind: Submit, Step: "a"})(Output{OK: true})
	h.Call(1, Input{Kind: Read, Step: "a"})(Output{Found: true, Rank: Rank(1, "queued")})
	if err := h.Check(time.Second); err != nil {
		t.Errorf("Check() = %v", err)
	}
	h.Call(1, Input{Kind: Read, Step: "a"})(Output{Found: false})
	if err := h.Check(time.Second); err == nil {
		t.Errorf("Check() = nil after a read lost the step, want an error")
	}
}
