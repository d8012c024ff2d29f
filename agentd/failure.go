package agentd

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// A stepError is a step's failure classified where it happened: a typed
// cause (an api.Cause* constant) and a sentence for people that holds no
// runtime error, no host path and no node name. The underlying error
// (containerd's, runsc's) is for the node's log only.
type stepError struct {
	cause  string
	reason string
	err    error
}

func (e *stepError) Error() string {
	if e.err == nil {
		return e.reason
	}
	return e.reason + ": " + e.err.Error()
}

func (e *stepError) Unwrap() error { return e.err }

// failure returns an error of cause with the sentence reason, wrapping err
// (which may be nil).
func failure(cause, reason string, err error) error {
	return &stepError{cause: cause, reason: reason, err: err}
}

// secretsFailure is a step's failure to get its secrets (secrets.go):
// why, in words that name no value and no ticket, and err for the node's
// log.
func secretsFailure(why string, err error) error {
	return failure(api.CauseSecretsUnavailable, "the step's secrets could not be fetched: "+why+"; the step did not run without them", err)
}

// nodeErrorReason is what a step's record says of a failure that is the
// node's own (containerd unreachable, a file it could not write).
const nodeErrorReason = "the node could not run the step (the node's log has the details)"

// classify returns the typed cause of err, a step's failure, and the
// sentence for people. This is the one place a step's failure becomes
// words; an error not classified where it happened is the node's error.
func classify(err error) (cause, reason string) {
	var se *stepError
	switch {
	case errors.As(err, &se):
		return se.cause, se.reason
	case errors.Is(err, errInvalid):
		// Our own validation's words: the field and its bound.
		return api.CauseInvalidStep, err.Error()
	case errors.Is(err, ErrLowDisk):
		return api.CauseLowDisk, "not enough free disk on the node for the step's workspace"
	case errors.Is(err, ErrWorkspaceTooLarge):
		return api.CauseWorkspaceTooLarge, "the workspace is larger than the step's workspace limit"
	case errors.Is(err, ErrNoImage):
		return api.CauseImageNotFound, "the step's image is not on the node"
	}
	return api.CauseNodeError, nodeErrorReason
}

// startFailure classifies the error of starting the step's command
// (cmd, its first argument) in its sandbox. The runtime says what went
// wrong only in its error's text: this is the one place that reads it.
func startFailure(cmd string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no such file or directory"), strings.Contains(msg, "executable file not found"):
		return failure(api.CauseCommandNotFound, fmt.Sprintf("%s: command %q not found in the image", ErrStartFailed, cmd), fmt.Errorf("%w: %w", ErrStartFailed, err))
	case strings.Contains(msg, "permission denied"):
		return failure(api.CauseCommandNotExecutable, fmt.Sprintf("%s: command %q is not executable", ErrStartFailed, cmd), fmt.Errorf("%w: %w", ErrStartFailed, err))
	}
	return failure(api.CauseStartFailed, fmt.Sprintf("%s: command %q could not be started", ErrStartFailed, cmd), fmt.Errorf("%w: %w", ErrStartFailed, err))
}

// failed is the exit record of step id that failed with err: state failed,
// terminated by the platform, with err's cause and sentence. err itself
// goes to logger, the node's log, only.
func failed(logger *slog.Logger, id cluster.StepID, queued time.Time, err error) cluster.ExitRecord {
	cause, reason := classify(err)
	if logger != nil {
		logger.Warn("step failed", "step", id, "cause", cause, "error", err)
	}
	return cluster.ExitRecord{
		Step:         id,
		State:        cluster.StateFailed,
		ExitCode:     -1,
		TerminatedBy: cluster.ByPlatform,
		Reason:       reason,
		Cause:        cause,
		Phases:       cluster.Phases{Queued: queued},
	}
}

// sandboxFailure is err, the error of creating a step's sandbox, classified:
// as it is when it was classified where it happened, else sandbox_failed.
func sandboxFailure(err error) error {
	var se *stepError
	if errors.As(err, &se) || errors.Is(err, errInvalid) || errors.Is(err, ErrLowDisk) || errors.Is(err, ErrWorkspaceTooLarge) || errors.Is(err, ErrNoImage) {
		return err
	}
	return failure(api.CauseSandboxFailed, "the step's sandbox could not be created", err)
}
