package agentd

import (
	"io"
	"sync/atomic"
)

// countingWriter counts bytes on their way to w and calls first once, before
// the first byte is passed on.
type countingWriter struct {
	w     io.Writer
	n     atomic.Int64
	first func()
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if len(p) > 0 && c.n.Load() == 0 && c.first != nil {
		c.first()
	}
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
