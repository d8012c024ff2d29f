// Command fatmain breaks every part of the rule that mains hold only
// flags (TestCmdRuleCatchesViolations). It is never built.
package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"

	"github.com/containerd/containerd/v2/client"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

var (
	_ = client.New
	_ = raft.NewRaft
	_ = prometheus.NewRegistry
)

func main() {
	go func() {}()
	var wg sync.WaitGroup
	wg.Go(func() {})
	var g errgroup.Group
	g.Go(func() error { return nil })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ln = tls.NewListener(ln, &tls.Config{})
	srv := &http.Server{}
	http.ListenAndServe("127.0.0.1:0", nil)
	srv.Serve(ln)
	wg.Wait()
}
