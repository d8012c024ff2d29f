package gateway

import (
	"context"
	"encoding/json"

	"github.com/rodon-compute/rodon/api"
)

// ScrubFrame returns line, one stream frame (an api.Frame as JSON, as the
// node agent serves it), with provider identifiers scrubbed from an
// event's message and an exit's reason, as Scrub does for the step
// objects. Output frames and lines it cannot decode are returned as they
// are. The stream relay calls it (relay.Config.Rewrite) for every frame
// that is not output.
func (g *Gateway) ScrubFrame(ctx context.Context, line []byte) []byte {
	var f api.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return line
	}
	var data any
	switch f.Kind {
	case api.KindEvent:
		e, err := f.Event()
		if err != nil {
			return line
		}
		scrubbed := Scrub(e.Message, g.nodes.known(ctx)...)
		if scrubbed == e.Message {
			return line
		}
		e.Message = scrubbed
		data = e
	case api.KindExit:
		x, err := f.Exit()
		if err != nil {
			return line
		}
		scrubbed := Scrub(x.Reason, g.nodes.known(ctx)...)
		if scrubbed == x.Reason {
			return line
		}
		x.Reason = scrubbed
		data = x
	default:
		return line
	}
	b, err := json.Marshal(data)
	if err != nil {
		return line
	}
	f.Data = b
	out, err := json.Marshal(f)
	if err != nil {
		return line
	}
	return out
}
