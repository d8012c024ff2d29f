package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestMain_(t *testing.T) {
	cmds := map[string]Command{
		"ok": func([]string, io.Writer, io.Writer) (int, error) { return 3, nil },
		"usage": func([]string, io.Writer, io.Writer) (int, error) {
			return 0, fmt.Errorf("%w: --x is required", ErrUsage)
		},
		"fail": func([]string, io.Writer, io.Writer) (int, error) { return 0, errors.New("boom") },
	}
	for _, tt := range []struct {
		args     []string
		code     int
		inStderr string
	}{
		{nil, ExitUsage, "usage: prog"},
		{[]string{"help"}, 0, ""},
		{[]string{"ok"}, 3, ""},
		{[]string{"usage"}, ExitUsage, "prog usage: --x is required"},
		{[]string{"fail"}, 9, "prog fail: boom"},
		{[]string{"nope"}, ExitUsage, `unknown command "nope"`},
	} {
		var out, errOut bytes.Buffer
		if code := Main("prog", "usage: prog\n", cmds, 9, tt.args, &out, &errOut); code != tt.code || !strings.Contains(errOut.String(), tt.inStderr) {
			t.Errorf("Main(%q) = %d, stderr %q; want %d with %q", tt.args, code, errOut.String(), tt.code, tt.inStderr)
		}
	}
	if _, err := Logger(io.Discard, "loud"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("Logger(loud) = %v, want a usage error naming --log-level", err)
	}
}
