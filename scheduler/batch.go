package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
)

// Limits of one CmdBatch or CmdBinaryBatch entry, and how many entries of the batcher may
// be committing at once.
const (
	maxBatchItems = 512
	maxBatchBytes = 256 << 10
	// maxInflight lets the next batches go to Raft while one commits:
	// Raft then writes and replicates them together (one disk sync for
	// several entries), where one at a time would pay a sync each.
	maxInflight = 4
)

// batcher is the leader's group commit for the commands of many callers
// (submissions, agent reports, heartbeats that change something). Apply
// queues a command and waits; run, one goroutine, takes whatever is queued
// (at most maxBatchItems items or maxBatchBytes) and logs it as one entry,
// while the next batch fills; up to maxInflight entries commit at once,
// each in a goroutine of run's. There is no timer: at low load a batch
// holds one command, logged as a plain entry, and costs one commit; under
// load batches grow by themselves.
//
// lead makes one per term and runs it; when leadership ends its context
// ends, run fails whatever is still queued with a *NotLeaderError, and
// Apply fails at once from then on, so that callers forward or retry as
// they do for a follower.
type batcher struct {
	raft *Raft
	// format returns the batches every member knows (batchNone: each
	// command is an entry of its own); each send asks.
	format func(context.Context) batchFormat
	// last is the format the last send found. Apply encodes a command
	// in it ahead, outside run; send encodes again any command whose
	// format is not its own.
	last atomic.Uint32
	wake chan struct{}

	mu      sync.Mutex
	queue   []*batchCall
	stopped bool
}

// batchCall is one queued command and where its answer goes.
type batchCall struct {
	cmd cluster.Command
	// item is cmd encoded in format.
	item   cluster.BatchItem
	format batchFormat
	done   chan batchAnswer // buffered: run never blocks on a caller
}

// newCall encodes cmd as an item in the format the last send found.
func (b *batcher) newCall(cmd cluster.Command) (*batchCall, error) {
	f := batchFormat(b.last.Load())
	item, err := newBatchItem(f, cmd)
	if err != nil {
		return nil, err
	}
	return &batchCall{cmd: cmd, item: item, format: f, done: make(chan batchAnswer, 1)}, nil
}

// encode returns c's item in format f, encoded again if need be.
func (c *batchCall) encode(f batchFormat) (cluster.BatchItem, error) {
	if f == c.format || f != batchBinary && c.format != batchBinary {
		return c.item, nil
	}
	return newBatchItem(f, c.cmd)
}

type batchAnswer struct {
	res any
	err error
}

func newBatcher(r *Raft, format func(context.Context) batchFormat) *batcher {
	return &batcher{raft: r, format: format, wake: make(chan struct{}, 1)}
}

// Apply logs cmd, which must be batchable, in the next batch and returns
// its own result or business error, as Raft.Apply does. If ctx ends first
// the error is ctx's and the command may still apply.
func (b *batcher) Apply(ctx context.Context, cmd cluster.Command) (any, error) {
	c, err := b.newCall(cmd)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil, b.raft.notLeaderNow()
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case a := <-c.done:
		return a.res, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ApplyAll logs cmds, which must be batchable, in order, in the next
// batches (the queue keeps them together and in order), and returns each
// command's result or business error (an error value) in results; err is
// a failure to log them (then any of them may or may not be applied).
func (b *batcher) ApplyAll(ctx context.Context, cmds []cluster.Command) (results []any, err error) {
	calls := make([]*batchCall, len(cmds))
	for i, cmd := range cmds {
		c, err := b.newCall(cmd)
		if err != nil {
			return nil, err
		}
		calls[i] = c
	}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil, b.raft.notLeaderNow()
	}
	for _, c := range calls {
		b.queue = append(b.queue, c)
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	results = make([]any, len(calls))
	for i, c := range calls {
		select {
		case a := <-c.done:
			switch {
			case a.err != nil && isLogError(a.err):
				err = a.err
			case a.err != nil:
				results[i] = a.err
			default:
				results[i] = a.res
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return results, nil
}

// isLogError reports whether err, an answer of the batcher, is a failure
// to log the command rather than the FSM's business error.
func isLogError(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrStopped) ||
		errors.Is(err, raft.ErrEnqueueTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// run commits batches until ctx ends, then fails what is queued and
// waits for the commits in flight to answer their callers.
func (b *batcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer b.stop()
	slots := make(chan struct{}, maxInflight)
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		for ctx.Err() == nil {
			// A slot first, so that the batch holds whatever queued
			// while the commits in flight took them all.
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			calls := b.take()
			if len(calls) == 0 {
				<-slots
				break
			}
			// Handed to Raft here, in queue order; waited for aside.
			wait := b.send(ctx, calls)
			wg.Go(func() {
				defer func() { <-slots }()
				wait()
			})
		}
	}
}

// take removes the next batch from the queue.
func (b *batcher) take() []*batchCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, size := 0, 0
	for n < len(b.queue) && n < maxBatchItems && (n == 0 || size+len(b.queue[n].item.Data) <= maxBatchBytes) {
		size += len(b.queue[n].item.Data)
		n++
	}
	calls := b.queue[:n:n]
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	return calls
}

// stop fails every queued call and every later Apply.
func (b *batcher) stop() {
	b.mu.Lock()
	calls := b.queue
	b.queue, b.stopped = nil, true
	b.mu.Unlock()
	err := b.raft.notLeaderNow()
	for _, c := range calls {
		c.done <- batchAnswer{err: err}
	}
}

// send hands calls to Raft, as one entry or, when batches are not
// allowed or there is one call, an entry each; the function it returns
// waits for them and answers each call.
func (b *batcher) send(ctx context.Context, calls []*batchCall) (wait func()) {
	f := b.format(ctx)
	b.last.Store(uint32(f))
	if len(calls) == 1 || f == batchNone {
		waits := make([]func(context.Context) (any, error), len(calls))
		for i, c := range calls {
			item, err := c.encode(batchJSON)
			if err != nil {
				waits[i] = func(context.Context) (any, error) { return nil, err }
				continue
			}
			waits[i] = b.raft.applyAsync(ctx, item.Type, append([]byte{byte(item.Type)}, item.Data...))
		}
		return func() {
			for i, c := range calls {
				res, err := waits[i](ctx)
				if e, ok := res.(error); ok && err == nil {
					res, err = nil, e
				}
				c.done <- batchAnswer{res: res, err: leadershipErr(ctx, err)}
			}
		}
	}
	items, sent := make([]cluster.BatchItem, 0, len(calls)), calls[:0:0]
	for _, c := range calls {
		item, err := c.encode(f)
		if err != nil {
			// (A command that encoded once encodes in the other format
			// too.) That call has its answer; the others are logged.
			c.done <- batchAnswer{err: err}
			continue
		}
		items, sent = append(items, item), append(sent, c)
	}
	t, entry := encodeBatch(f, items)
	w := b.raft.applyAsync(ctx, t, entry)
	return func() {
		res, err := w(ctx)
		answerBatch(sent, res, leadershipErr(ctx, err))
	}
}

// answerBatch gives each call its item's result of a batch entry.
func answerBatch(calls []*batchCall, res any, err error) {
	br, ok := res.(*BatchResult)
	if err == nil && (!ok || len(br.Results) != len(calls)) {
		err = fmt.Errorf("batch of %d items answered %T", len(calls), res)
	}
	for i, c := range calls {
		if err != nil {
			c.done <- batchAnswer{err: err}
			continue
		}
		r := br.Results[i]
		if e, ok := r.(error); ok {
			c.done <- batchAnswer{err: e}
			continue
		}
		c.done <- batchAnswer{res: r}
	}
}

// leadershipErr turns the end of the batcher's context (leadership lost)
// into ErrLeadershipLost for the callers: their entry may or may not have
// been applied.
func leadershipErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return ErrLeadershipLost
	}
	return err
}

// apply logs cmd through the leader's batcher when there is one and cmd
// is batchable, else as an entry of its own (Raft.Apply).
func (s *Server) apply(ctx context.Context, cmd cluster.Command) (any, error) {
	if b := s.batcher.Load(); b != nil && cluster.Batchable(cmd.CommandType()) {
		return b.Apply(ctx, cmd)
	}
	return s.raft.Apply(ctx, cmd)
}
