// Command workspace benchmarks workspaces of the blob store (SPEC.md,
// "Workspaces and revisions"; docs/design/workspaces.md) on one fleet on
// 127.0.0.1 with mutual TLS between every component (benchfleet: one
// `scheduler serve --bootstrap` with the default local blob store in its
// data directory, one `agentd serve --network none`, one `gateway serve`
// with HTTPS), each measurement against a baseline taken in the same run,
// alternating with it run by run, reported as ratios of medians:
//
//   - upload: `PUT /v1/workspaces/{id}/files/big.bin` of a -size file
//     of random bytes, streamed from a file through the gateway, against
//     `cp --reflink=never` of the same file to another file in the same
//     directory. What
//     is counted for both: from the start of the request (of cp) to its
//     answer (its exit), then a `sync` of the whole machine, so that the
//     store's blob is on disk as cp's copy is; a `sync` before each
//     measurement is not counted. Each run changes the file's first bytes
//     so that no upload finds its blob stored already (every upload is
//     a new revision; the store keeps them all: (-runs+1) × -size of disk).
//   - download: `GET .../files/big.bin` of the head into a file, then
//     `sync`, against `cp` and `sync` of the same bytes again.
//   - the bytes a step moves: on the workspace so made (big.bin and a
//     4 KiB small.bin), step A (`head -c 4096 /dev/urandom > small.bin`,
//     from the head, a cold node cache) then step B (the same, from A's
//     revision, as a run's next step is). The bytes the node fetched and
//     uploaded for each step are read from agentd's and the scheduler's
//     Prometheus metrics before and after it (the names are in
//     metrics.go); B should move only small.bin and the manifests, which
//     -check-delta enforces for each direction.
//   - step latency: `true` submitted to the scheduler with an empty
//     workspace of the store, against the same step without a workspace,
//     -n times each, alternating; from the submission to the step's
//     terminal record (the exit record, committed after the node's
//     upload), each step's cleanup awaited before the next.
//
// All data is in temporary directories, removed at the end. Other
// containerd users on the machine check for leaks, so hold the lock:
//
//	go build -o bin/ ./cmd/... && flock /tmp/rodon-host.lock go run ./bench/workspace -size 1GiB -runs 3 -n 20 -min-upload-ratio 0.5 -min-download-ratio 0.5 -check-delta -max-empty-ratio 1.10 -out docs/bench-workspace-latest.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rodon-compute/rodon/internal/benchfleet"
	"github.com/rodon-compute/rodon/internal/size"
)

type config struct {
	size       int64
	runs, n    int
	bin, out   string
	minUpload  float64
	minDown    float64
	checkDelta bool
	maxEmpty   float64
}

func main() {
	c := config{size: 1 << 30}
	flag.Func("size", "size of the file uploaded and downloaded, and of the workspace of the delta steps ("+size.Forms+"; default 1GiB)", func(s string) error {
		n, err := size.Parse(s)
		if err == nil && n < 1<<20 {
			err = fmt.Errorf("%s: at least 1MiB", s)
		}
		c.size = n
		return err
	})
	flag.IntVar(&c.runs, "runs", 3, "runs of the upload and download measurements, after one warm-up run")
	flag.IntVar(&c.n, "n", 20, "runs of the step latency measurement, after one warm-up run")
	flag.StringVar(&c.bin, "bin", "bin", "directory of the scheduler, agentd and gateway binaries")
	flag.StringVar(&c.out, "out", "", "also write the markdown report to this file")
	flag.Float64Var(&c.minUpload, "min-upload-ratio", 0, "fail if the median upload throughput is below this fraction of cp's (0: report only)")
	flag.Float64Var(&c.minDown, "min-download-ratio", 0, "fail if the median download throughput is below this fraction of cp's (0: report only)")
	flag.BoolVar(&c.checkDelta, "check-delta", false, "fail if the second step moved more than its changed file and the manifests, in either direction")
	flag.Float64Var(&c.maxEmpty, "max-empty-ratio", 0, "fail if the median latency of a step with an empty workspace exceeds this multiple of one without (0: report only)")
	flag.Parse()
	if c.runs < 1 || c.n < 1 {
		fmt.Fprintln(os.Stderr, "workspace: -runs and -n must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	report, err := run(ctx, c)
	stop()
	os.Exit(benchfleet.Finish("workspace", c.out, report, err))
}
