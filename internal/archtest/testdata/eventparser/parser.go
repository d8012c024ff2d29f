// Package eventparser holds parsers of event message text, for
// TestNoEventMessageParser to catch: each line marked "want" must be
// reported, the others not.
package eventparser

import (
	"regexp"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

var deniedRE = regexp.MustCompile(`egress denied: (\S+), (\w+)`)

func parsers(e api.Event, es []api.Event, p *api.Event) {
	_ = strings.HasPrefix(e.Message, "egress denied: ") // want
	_ = deniedRE.FindStringSubmatch(p.Message)          // want
	if es[0].Message == "no files changed" {            // want
	}
	switch e.Message { // want
	}
	m := e.Message // want
	_ = m[:3]
	_, _, _ = strings.Cut(es[1].Message, " changed: ") // want
	_ = e.Message[0]                                   // want
}

func fine(e api.Event, show func(string)) api.Event {
	show(e.Message)
	out := api.Event{Kind: e.Kind, Message: e.Message}
	out.Message = e.Message
	e.Message = "written, not read"
	return out
}
