package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// snapshotSaveCmd is `schedctl snapshot save FILE`: it writes the cluster's
// state to FILE, atomically (FILE is complete or untouched), or to
// standard output when FILE is "-".
type snapshotSaveCmd struct{}

func (*snapshotSaveCmd) synopsis() string    { return "snapshot save FILE [-o json]" }
func (*snapshotSaveCmd) flags(*flag.FlagSet) {}

func (*snapshotSaveCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantArgs(args, "FILE"); err != nil {
		return 0, err
	}
	file := args[0]
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	doc, err := sc.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("get snapshot: %w", err)
	}
	if !json.Valid(doc) {
		return 0, fmt.Errorf("the scheduler's snapshot is not a JSON document (%d bytes); %s not written", len(doc), file)
	}
	if file == "-" {
		_, err := c.stdout.Write(doc)
		return 0, err
	}
	if err := writeFileAtomic(file, doc); err != nil {
		return 0, err
	}
	if c.g.json() {
		return 0, printJSON(c.stdout, map[string]any{"file": file, "bytes": len(doc)})
	}
	_, err = fmt.Fprintf(c.stdout, "saved snapshot to %s (%d bytes)\n", file, len(doc))
	return 0, err
}

// writeFileAtomic writes b to a temporary file beside file, syncs it and
// renames it over file, so that file is either complete or untouched.
func writeFileAtomic(file string, b []byte) (err error) {
	dir, base := filepath.Split(file)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := os.Rename(f.Name(), file); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// snapshotRestoreCmd is `schedctl snapshot restore FILE`: it replaces the
// cluster's state with a snapshot saved before ("-": standard input).
type snapshotRestoreCmd struct{}

func (*snapshotRestoreCmd) synopsis() string    { return "snapshot restore FILE [-o json]" }
func (*snapshotRestoreCmd) flags(*flag.FlagSet) {}

func (*snapshotRestoreCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantArgs(args, "FILE"); err != nil {
		return 0, err
	}
	file := args[0]
	var doc []byte
	var err error
	if file == "-" {
		doc, err = io.ReadAll(c.stdin)
	} else {
		doc, err = os.ReadFile(file)
	}
	if err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	if !json.Valid(doc) {
		return 0, fmt.Errorf("%s is not a snapshot: not a JSON document", file)
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	if err := sc.RestoreSnapshot(ctx, doc); err != nil {
		return 0, fmt.Errorf("restore snapshot: %w", err)
	}
	if c.g.json() {
		return 0, printJSON(c.stdout, map[string]any{"restored": file, "bytes": len(doc)})
	}
	_, err = fmt.Fprintf(c.stdout, "restored the cluster's state from %s (%d bytes)\n", file, len(doc))
	return 0, err
}
