package main

import (
	"flag"
	"io"
	"testing"

	"github.com/rodon-compute/rodon/internal/grammartest"
)

// TestGrammar: scheduler serve's --node-id (a member id) reads the
// table's names as the other entry points do (internal/grammartest), with
// TLS or without.
func TestGrammar(t *testing.T) {
	for _, extra := range [][]string{{"--plaintext"}, {"--tls-dir", t.TempDir()}} {
		grammartest.Run(t, grammartest.Entry{grammartest.Name: func(t *testing.T, s string) (int64, error) {
			var f serveFlags
			fs := flag.NewFlagSet("scheduler serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			args := append([]string{"--node-id=" + s, "--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:7101", "--http-addr", "127.0.0.1:7100"}, extra...)
			if err := fs.Parse(args); err != nil {
				return 0, err
			}
			_, err := f.config()
			return 0, err
		}})
	}
}
