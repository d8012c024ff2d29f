package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchfleet"
)

// sample is one round of one kind: the time of -calls calls through the
// gateway and of -calls local operations, and for Read of -calls
// downloads of the same file with the files API (the same bytes through
// the gateway without a run: what the tool call's bookkeeping adds).
type sample struct {
	gw, local, files time.Duration
}

// ratio is the gateway's calls per second over the local ones'.
func (s sample) ratio() float64 { return float64(s.local) / float64(s.gw) }

// op is one kind of call: through a run's grant, locally, and (when
// files is set) through the files API.
type op struct {
	name  string
	gw    func(ctx context.Context, run *benchfleet.Client, id string) error
	local func() error
	files func(ctx context.Context) error
}

// measure runs one warm-up round and -runs rounds of each kind,
// alternating which side goes first.
func (b *bench) measure(ctx context.Context) error {
	re := regexp.MustCompile(grepPattern)
	ops := []op{
		{name: "Read", gw: b.gwRead, files: b.filesRead, local: func() error {
			content, err := os.ReadFile(filepath.Join(b.local, readName))
			if err == nil && len(content) < 10<<10 {
				err = fmt.Errorf("%s: %d bytes", readName, len(content))
			}
			return err
		}},
		{name: "Grep", gw: b.gwGrep, local: func() error {
			n, err := localGrep(filepath.Join(b.local, grepDir), re)
			if err == nil && n != b.matches {
				err = fmt.Errorf("the local grep found %d matches, want %d", n, b.matches)
			}
			return err
		}},
	}
	for round := 0; round <= b.c.runs; round++ {
		for i, o := range ops {
			s, err := b.round(ctx, o, round%2 == 1)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", o.name, round, err)
			}
			if round == 0 {
				continue // the warm-up
			}
			if i == 0 {
				b.read = append(b.read, s)
			} else {
				b.grep = append(b.grep, s)
			}
		}
	}
	return nil
}

// round times -calls calls of o through a fresh run and -calls local
// ones, the local ones first when localFirst.
func (b *bench) round(ctx context.Context, o op, localFirst bool) (sample, error) {
	var s sample
	local := func() error {
		start := time.Now()
		for range b.c.calls {
			if err := o.local(); err != nil {
				return err
			}
		}
		s.local = time.Since(start)
		return nil
	}
	gw := func() error {
		var created api.RunCreated
		if err := b.gw.Do(ctx, http.MethodPost, "/v1/runs", api.RunRequest{Workspace: b.ws, Agent: agent}, &created); err != nil {
			return err
		}
		run := b.gw.WithBearer(created.Grant)
		start := time.Now()
		for range b.c.calls {
			if err := o.gw(ctx, run, created.ID); err != nil {
				return err
			}
		}
		s.gw = time.Since(start)
		return run.Do(ctx, http.MethodPost, "/v1/runs/"+created.ID+"/finish", api.FinishRequest{Reason: "bench/tools round done"}, nil)
	}
	files := func() error {
		if o.files == nil {
			return nil
		}
		start := time.Now()
		for range b.c.calls {
			if err := o.files(ctx); err != nil {
				return err
			}
		}
		s.files = time.Since(start)
		return nil
	}
	order := []func() error{gw, files, local}
	if localFirst {
		order = []func() error{local, files, gw}
	}
	for _, f := range order {
		if err := f(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// filesRead downloads read.txt with GET /v1/workspaces/{id}/files/read.txt
// as the admin key.
func (b *bench) filesRead(ctx context.Context) error {
	resp, err := b.gw.Send(ctx, http.MethodGet, "/v1/workspaces/"+b.ws+"/files/"+readName, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && (resp.StatusCode != http.StatusOK || n < 10<<10) {
		err = fmt.Errorf("GET files/%s: %s, %d bytes", readName, resp.Status, n)
	}
	return err
}

// call makes one tool call with run's grant and decodes its result.
func call(ctx context.Context, run *benchfleet.Client, id, tool string, input, result any) error {
	in, err := json.Marshal(input)
	if err != nil {
		return err
	}
	var ans api.ToolAnswer
	if err := run.Do(ctx, http.MethodPost, "/v1/runs/"+id+"/steps", api.ToolCall{Tool: tool, Input: in}, &ans); err != nil {
		return err
	}
	if ans.Step.State != api.StepDone {
		return fmt.Errorf("%s: step %s %s: %s", tool, ans.Step.ID, ans.Step.State, ans.Result)
	}
	return json.Unmarshal(ans.Result, result)
}

func (b *bench) gwRead(ctx context.Context, run *benchfleet.Client, id string) error {
	var r api.ReadResult
	if err := call(ctx, run, id, api.ToolRead, api.ReadInput{Path: readName}, &r); err != nil {
		return err
	}
	if r.Error != "" || r.Truncated || len(r.Content) < 10<<10 {
		return fmt.Errorf("Read %s: %d bytes of content, truncated %v, error %q; want the whole file", readName, len(r.Content), r.Truncated, r.Error)
	}
	return nil
}

func (b *bench) gwGrep(ctx context.Context, run *benchfleet.Client, id string) error {
	var r api.GrepResult
	if err := call(ctx, run, id, api.ToolGrep, api.GrepInput{Pattern: grepPattern, Path: grepDir}, &r); err != nil {
		return err
	}
	if r.Error != "" || r.Count != b.matches || r.Files != b.matches {
		return fmt.Errorf("Grep: %d matches in %d files, error %q; want %d in as many files", r.Count, r.Files, r.Error, b.matches)
	}
	return nil
}

// localGrep counts the lines under dir that re matches, reading every
// file as the gateway's Grep does.
func localGrep(dir string, re *regexp.Regexp) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(content))
		for sc.Scan() {
			if re.Match(sc.Bytes()) {
				n++
			}
		}
		return sc.Err()
	})
	return n, err
}
