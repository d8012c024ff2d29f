// Package logstore keeps each step's output stream on the node's disk: an
// append-only log of api.Frame values per step, written by the step's output
// path and read by any number of readers, live or after the step has ended.
//
// A log is two files in the store's directory: <step>.log holds one frame
// per line, as the JSON served to clients, and <step>.idx holds the byte
// offset of every frame as a little-endian uint64, so a reader resumes after
// frame N (?from=N) with one seek. Neither file is held in memory: the writer
// appends to disk and returns, readers read from disk at their own pace, so
// a slow reader never slows the step and memory stays bounded whatever the
// step prints. Followers wait on a channel that the writer closes when it
// appends, not on a timer.
//
// Everything is bounded: small writes are coalesced into frames (at most
// Config.FlushDelay late), a log keeps at most its output cap (the head as
// it comes, the tail held back in <step>.tail0 and .tail1 until the end,
// and an output_truncated event saying what was dropped between them; see
// Log), and all logs together stay under Config.Budget.
//
// Call order: New, then Run in a goroutine of its own for retention and
// the budget (the janitor removes a finished log Config.Retention after its
// exit frame, and the longest idle ones while the store is over its
// budget). For each step, Create or CreateLimited returns the Log that the
// step's output path writes: its Stdout and Stderr writers go to the
// runtime, Event appends lifecycle events, Finish appends the held-back
// output, and Exit appends the exit record and ends the log. Open returns
// a Reader from any frame on. Logs left by an earlier agent are found
// again by New.
package logstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// Errors of the store. Test for them with errors.Is.
var (
	// ErrNotFound: the store has no log for the step (never created, or
	// removed).
	ErrNotFound = errors.New("no output log for step")
	// ErrExists: Create was called for a step whose log is finished or is
	// being written.
	ErrExists = errors.New("output log exists")
	// ErrBadFrom: a reader asked to start after a frame the log does not
	// have.
	ErrBadFrom = errors.New("bad frame number")
	// ErrFinished: a write came after the log's exit frame.
	ErrFinished = errors.New("output log is finished")
	// ErrClosed: a write came after the Log was closed.
	ErrClosed = errors.New("output log is closed")
	// ErrRemoved: the log was removed while it was written or followed.
	ErrRemoved = errors.New("output log was removed")
	// ErrCorrupt: the log's files do not hold what the store wrote.
	ErrCorrupt = errors.New("output log is corrupt")
)

// Config configures a Store.
type Config struct {
	// Dir holds the logs; it is created if missing.
	Dir string
	// Retention is how long a log is kept after its exit frame (or, for a
	// log whose writer went away without one, after its last frame).
	Retention time.Duration
	// SweepInterval is how often Run looks for logs past their retention.
	SweepInterval time.Duration
	// MaxFrameData caps the output bytes in one frame; longer writes are
	// split.
	MaxFrameData int
	// FlushDelay is how long output may wait to be coalesced with more
	// into one frame; zero appends every write at once (a frame per write,
	// which costs about 100 bytes of frame per write).
	FlushDelay time.Duration
	// OutputBytes is the output cap of a log made by Create (CreateLimited
	// takes the step's own): the log keeps its first and last halves.
	OutputBytes int64
	// Budget caps the disk all logs take together: past it, finished logs
	// (and logs no agent writes any more) are removed oldest first, before
	// their retention ends. Logs being written are bounded by their caps.
	Budget int64
}

// DefaultConfig returns the configuration of a standard install.
func DefaultConfig() Config {
	return Config{
		Dir:           "/var/lib/rodon/agentd/logs",
		Retention:     DefaultRetention,
		SweepInterval: time.Minute,
		MaxFrameData:  32 << 10,
		FlushDelay:    DefaultFlushDelay,
		OutputBytes:   cluster.DefaultLimits.OutputBytes,
		Budget:        DefaultBudget,
	}
}

// Defaults of a standard install (agentd serve --log-retention,
// --log-budget).
const (
	// DefaultRetention is SPEC's: step output stays on the node 7 days.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultBudget is the disk all of a node's logs may take: 160 logs of
	// the default output cap (64 MiB), with room for the frames'
	// encoding.
	DefaultBudget = 16 << 30
	// DefaultFlushDelay keeps coalescing below what a person watching a
	// stream notices.
	DefaultFlushDelay = 25 * time.Millisecond
	// MaxFlushDelay bounds Config.FlushDelay.
	MaxFlushDelay = time.Second
)

// minFrameData keeps room for splitting at a UTF-8 boundary.
const minFrameData = 64

// MinOutputBytes is the smallest output cap of a log (cluster.MinLimits').
var MinOutputBytes = cluster.MinLimits.OutputBytes

// Store is a directory of step output logs. It is safe for concurrent use.
type Store struct {
	cfg    Config
	logger *slog.Logger

	// kickc asks Run for a sweep now (a log finished: the budget may be
	// exceeded).
	kickc chan struct{}

	// mu guards logs. Lock order: Store.mu, then stepLog.mu.
	mu   sync.Mutex
	logs map[cluster.StepID]*stepLog
}

// kick asks Run for a sweep soon, without waiting.
func (s *Store) kick() {
	select {
	case s.kickc <- struct{}{}:
	default:
	}
}

// New opens the store in cfg.Dir, creating the directory if needed, and
// finds the logs already in it. It starts no goroutine.
func New(cfg Config, logger *slog.Logger) (*Store, error) {
	switch {
	case cfg.Dir == "":
		return nil, errors.New("log store config: empty directory")
	case cfg.Retention <= 0:
		return nil, fmt.Errorf("log store config: retention %v: must be positive", cfg.Retention)
	case cfg.SweepInterval <= 0:
		return nil, fmt.Errorf("log store config: sweep interval %v: must be positive", cfg.SweepInterval)
	case cfg.MaxFrameData < minFrameData:
		return nil, fmt.Errorf("log store config: max frame data %d: must be at least %d bytes", cfg.MaxFrameData, minFrameData)
	case cfg.FlushDelay < 0 || cfg.FlushDelay > MaxFlushDelay:
		return nil, fmt.Errorf("log store config: flush delay %v: want 0 to %v", cfg.FlushDelay, MaxFlushDelay)
	case cfg.OutputBytes < MinOutputBytes:
		return nil, fmt.Errorf("log store config: output cap %d bytes: want at least %d", cfg.OutputBytes, MinOutputBytes)
	case cfg.Budget <= 0:
		return nil, fmt.Errorf("log store config: budget %d bytes: must be positive", cfg.Budget)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	s := &Store{
		cfg:    cfg,
		logger: logger.With("component", "logstore"),
		logs:   make(map[cluster.StepID]*stepLog),
		kickc:  make(chan struct{}, 1),
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.removeStrayTails()
	return s, nil
}

// load finds the logs in the store's directory. A log whose tail was torn
// by a crash keeps the frames before the tear.
func (s *Store) load() error {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("read log directory: %w", err)
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), logSuffix)
		id := cluster.StepID(name)
		if !ok || !e.Type().IsRegular() || validateID(id) != nil {
			continue
		}
		l := s.newStepLog(id)
		if err := l.scan(); err != nil {
			// Keep what is readable; the janitor removes the rest in time.
			s.logger.Warn("recover output log", "step", id, "error", err)
		}
		s.logs[id] = l
	}
	return nil
}

const (
	logSuffix = ".log"
	idxSuffix = ".idx"
	// tailSuffix, with 0 or 1 after it, names a log's tail segments.
	tailSuffix = ".tail"
)

func (s *Store) newStepLog(id cluster.StepID) *stepLog {
	base := filepath.Join(s.cfg.Dir, string(id))
	return &stepLog{id: id, logPath: base + logSuffix, idxPath: base + idxSuffix}
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.cfg.Dir }

// validateID keeps step IDs usable as file names.
func validateID(id cluster.StepID) error {
	if len(id) == 0 || len(id) > 128 || id[0] == '.' || id[0] == '-' {
		return fmt.Errorf("step id %q: want 1-128 characters of a-z, A-Z, 0-9, '.', '-' and '_'", id)
	}
	for _, c := range []byte(id) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
		default:
			return fmt.Errorf("step id %q: want 1-128 characters of a-z, A-Z, 0-9, '.', '-' and '_'", id)
		}
	}
	return nil
}

// lookup returns the log of id or ErrNotFound.
func (s *Store) lookup(id cluster.StepID) (*stepLog, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[id]; l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("step %s: %w", id, ErrNotFound)
}

// Remove deletes the log of id now, whatever its retention. A writer's
// later writes fail with ErrRemoved; readers return the frames they can
// still reach and then ErrRemoved (or io.EOF if the log was finished).
func (s *Store) Remove(id cluster.StepID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logs[id]
	if l == nil {
		return fmt.Errorf("step %s: %w", id, ErrNotFound)
	}
	delete(s.logs, id)
	return l.remove()
}
