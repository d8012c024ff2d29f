package gateway

import (
	"context"
	"encoding/json"

	"github.com/rodon-compute/rodon/api"
)

// ScrubFrame returns line, one stream frame (an api.Frame as JSON, as the
// node agent serves it), with an event as the step objects show it (its
// message written by the gateway from its payload, publicEvent) and
// provider identifiers scrubbed from an exit's reason (Scrub). Output frames and lines it cannot decode are returned as they
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
		data = publicEvent(e, g.nodes.known(ctx))
	case api.KindExit:
		x, err := f.Exit()
		if err != nil {
			return line
		}
		x.Reason = Scrub(x.Reason, g.nodes.known(ctx)...)
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
