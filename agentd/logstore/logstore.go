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
// Call order: New, then Run in a goroutine of its own for retention (the
// janitor removes a finished log Config.Retention after its exit frame).
// For each step, Create returns the Log that the step's output path writes:
// its Stdout and Stderr writers go to the runtime, Event appends lifecycle
// events, and Exit appends the exit record and ends the log. Open returns a
// Reader from any frame on. Logs left by an earlier agent are found again
// by New.
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
}

// DefaultConfig returns the configuration of a standard install.
func DefaultConfig() Config {
	return Config{
		Dir:           "/var/lib/rodon/agentd/logs",
		Retention:     24 * time.Hour,
		SweepInterval: time.Minute,
		MaxFrameData:  32 << 10,
	}
}

// minFrameData keeps room for splitting at a UTF-8 boundary.
const minFrameData = 64

// Store is a directory of step output logs. It is safe for concurrent use.
type Store struct {
	cfg    Config
	logger *slog.Logger

	// mu guards logs. Lock order: Store.mu, then stepLog.mu.
	mu   sync.Mutex
	logs map[cluster.StepID]*stepLog
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
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	s := &Store{
		cfg:    cfg,
		logger: logger.With("component", "logstore"),
		logs:   make(map[cluster.StepID]*stepLog),
	}
	if err := s.load(); err != nil {
		return nil, err
	}
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
