package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/rodon-compute/rodon/bundles"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/cli"
)

func probeCmd(args []string, stdout, stderr io.Writer) (int, error) {
	var f runtimeFlags
	var output, image string
	fs := newFlagSet("probe", stderr)
	f.register(fs)
	fs.StringVar(&output, "o", "text", "output format: text or json")
	fs.StringVar(&image, "image", "base", "image of the canary sandbox")
	if err := parseFlags(fs, args); err != nil {
		return 0, err
	}
	if output != "text" && output != "json" {
		return 0, fmt.Errorf("%w: -o %q: want text or json", cli.ErrUsage, output)
	}
	ctx, rt, _, closeRT, err := f.open(stderr)
	if err != nil {
		return 0, err
	}
	defer closeRT()
	h := rt.Probe(ctx, bundles.Ref(image))
	if output == "json" {
		b, _ := json.Marshal(h)
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintln(stdout, h.State)
		for _, r := range h.Reasons {
			fmt.Fprintln(stdout, "  "+r)
		}
	}
	if h.State != cluster.NodeReady {
		return 1, nil
	}
	return 0, nil
}
