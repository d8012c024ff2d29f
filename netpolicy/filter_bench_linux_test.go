package netpolicy

import (
	"net/netip"
	"testing"
	"time"
)

// BenchmarkFilterRun measures the egress program's cost per packet with
// Program.Run and a repeat count (BPF_PROG_TEST_RUN runs it b.N times on one
// frame in the kernel and reports the mean), for the frames a sandbox sends
// most and for a denied one. It runs on a thread in a namespace standing in
// for a node (forwarding on, a default route of each family), so route
// lookups cost what they cost on a node. Record results in docs/BENCHMARKS.md:
//
//	flock /tmp/rodon-host.lock go test -run '^$' -bench FilterRun -benchtime 2000000x -count 5 ./netpolicy
func BenchmarkFilterRun(b *testing.B) {
	f := newTestFilter(b)
	node := newBenchNode(b)
	cfg := &SandboxConfig{Resolvers: []netip.Addr{netip.MustParseAddr("10.0.0.53")}}
	a := netip.MustParseAddr
	ack := func(frame []byte, l4off int) []byte {
		frame[l4off+13] = 0x10 // ACK: an established connection's packet
		return frame
	}
	twoExt := make([]byte, 16)
	twoExt[1] = 1 // one hop-by-hop header of 16 bytes
	frames := []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"v4-udp-public", ipv4Frame(a("11.0.0.7"), protoUDP, 443), verdictNext},
		{"v4-tcp-ack-public", ack(ipv4Frame(a("11.0.0.7"), protoTCP, 443), 14+20), verdictNext},
		{"v6-tcp-ack-public", ack(ipv6L4(a("2600:1::7"), protoTCP, 443), 14+40), verdictNext},
		{"v6-udp-hopbyhop-public", ipv6Frame(a("2600:1::7"), 64, twoExt, protoUDP, l4(protoUDP, 443)), verdictNext},
		// A TCP packet other than a SYN is denied without an answer, so
		// every repetition sees the same frame.
		{"v4-tcp-ack-private-denied", ack(ipv4Frame(a("10.9.9.9"), protoTCP, 443), 14+20), verdictDrop},
		{"v4-udp-dns-resolver", ipv4Frame(a("10.0.0.53"), protoUDP, 53), verdictNext},
	}
	setTestConfig(b, f, cfg)
	for _, fr := range frames {
		b.Run(fr.name, func(b *testing.B) {
			var ret uint32
			var per time.Duration
			err := doInNS(node, func() (err error) {
				ret, per, err = f.objs.EgressFilter.Benchmark(fr.frame, b.N, b.ResetTimer)
				return err
			})
			if err != nil {
				b.Fatalf("Program.Run: %v", err)
			}
			if ret != fr.want {
				b.Fatalf("Run() = %#x, want %#x", ret, fr.want)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
			if per > 0 {
				b.ReportMetric(float64(time.Second)/float64(per), "pkt/s")
			}
		})
	}
}
