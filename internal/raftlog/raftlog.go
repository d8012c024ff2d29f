// Package raftlog adapts log/slog to the hclog.Logger that hashicorp/raft
// wants, so the scheduler logs one structured stream. It is the only place
// that knows about hclog.
package raftlog

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// LevelTrace is the slog level of hclog's Trace, below slog.LevelDebug.
const LevelTrace = slog.LevelDebug - 4

// New returns an hclog.Logger that writes to logger. Names given with Named
// are joined with "." into the "logger" attribute. SetLevel is ignored: the
// slog handler decides what is written.
func New(logger *slog.Logger) hclog.Logger {
	return &adapter{base: logger, logger: logger}
}

// adapter is immutable: With and Named return new adapters.
type adapter struct {
	base    *slog.Logger // with the implied args, without the name
	logger  *slog.Logger // base plus the "logger" attribute
	name    string
	implied []any
}

func newAdapter(base *slog.Logger, name string, implied []any) *adapter {
	a := &adapter{base: base, logger: base, name: name, implied: implied}
	if name != "" {
		a.logger = base.With("logger", name)
	}
	return a
}

func level(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *adapter) Log(l hclog.Level, msg string, args ...any) {
	if l == hclog.Off {
		return
	}
	lv := level(l)
	ctx := context.Background()
	if !a.logger.Enabled(ctx, lv) {
		return
	}
	// hclog.Fmt values are formatted as hclog would; other values are
	// rendered by slog, and an odd trailing key becomes !BADKEY.
	for i, v := range args {
		if f, ok := v.(hclog.Format); ok && len(f) > 0 {
			args = slices.Clone(args)
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...)
			} else {
				args[i] = fmt.Sprint(f...)
			}
		}
	}
	a.logger.Log(ctx, lv, msg, args...)
}

func (a *adapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *adapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *adapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *adapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *adapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *adapter) enabled(l hclog.Level) bool {
	return a.logger.Enabled(context.Background(), level(l))
}

func (a *adapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *adapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *adapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *adapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *adapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *adapter) ImpliedArgs() []any { return a.implied }

func (a *adapter) With(args ...any) hclog.Logger {
	return newAdapter(a.base.With(args...), a.name, append(append([]any(nil), a.implied...), args...))
}

func (a *adapter) Name() string { return a.name }

func (a *adapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.ResetNamed(name)
}

func (a *adapter) ResetNamed(name string) hclog.Logger {
	return newAdapter(a.base, name, a.implied)
}

func (a *adapter) SetLevel(hclog.Level) {}

func (a *adapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (a *adapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *adapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	l := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		l = opts.ForceLevel
	}
	return writer{a: a, level: l}
}

// writer turns lines written by a standard library logger into records.
// A "[LEVEL]" prefix, as hashicorp libraries write, sets the level.
type writer struct {
	a     *adapter
	level hclog.Level
}

func (w writer) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	l := w.level
	for prefix, pl := range map[string]hclog.Level{
		"[TRACE]": hclog.Trace, "[DEBUG]": hclog.Debug, "[INFO]": hclog.Info,
		"[WARN]": hclog.Warn, "[ERR]": hclog.Error, "[ERROR]": hclog.Error,
	} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			l, msg = pl, strings.TrimSpace(rest)
			break
		}
	}
	w.a.Log(l, msg)
	return len(p), nil
}
