package agentd

import (
	"errors"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/treecopy"
)

// filesChangedEvent is the files_changed event of c: the paths in its
// payload, at most api.MaxFilesNamed of them (added first, then modified,
// then removed) and the count of the others, and the same in its message
// for people.
func filesChangedEvent(c treecopy.Changes, now time.Time) cluster.Event {
	fc := &api.FilesChanged{Added: []string{}, Modified: []string{}, Removed: []string{}}
	room := api.MaxFilesNamed
	for _, l := range []struct {
		dst *[]string
		src []string
	}{{&fc.Added, c.Added}, {&fc.Modified, c.Modified}, {&fc.Removed, c.Removed}} {
		n := min(room, len(l.src))
		*l.dst = append(*l.dst, l.src[:n]...)
		room -= n
		fc.More += len(l.src) - n
	}
	return cluster.Event{Time: now, Kind: cluster.EventFilesChanged, Message: c.String(), Files: fc}
}

// notCopiedMessage is the message of the warning that the workspace was
// not copied back after err; err itself goes to the node's log.
func notCopiedMessage(err error) string {
	const msg = "workspace not copied back"
	switch {
	case errors.Is(err, ErrLowDisk):
		return msg + ": not enough free disk on the node"
	case errors.Is(err, ErrWorkspaceTooLarge):
		return msg + ": the step left more than its workspace limit"
	}
	return msg
}
