package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Attachment is the egress filter on one sandbox's host-side veth. Close it
// when the sandbox's network is torn down; deleting the veth first is fine.
type Attachment struct {
	f       *Filter
	ifindex int
	link    link.Link // nil once closed; guarded by f.mu
}

// Counters returns the packets denied so far by reason, with the last denied
// destination of each. Reasons with no drops are absent.
func (a *Attachment) Counters() (map[Reason]Count, error) {
	out := make(map[Reason]Count)
	for r := Reason(1); r <= maxReason; r++ {
		c, ok, err := a.f.readCount(a.ifindex, r)
		if err != nil {
			return nil, fmt.Errorf("read egress counters for ifindex %d: %w", a.ifindex, err)
		}
		if ok && c.Packets > 0 {
			out[r] = c
		}
	}
	return out, nil
}

// Close detaches the filter and deletes the sandbox's configuration and
// counters. Read Counters before closing. Close is idempotent.
func (a *Attachment) Close() error {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if a.link == nil {
		return nil
	}
	err := a.link.Close()
	a.link = nil
	delete(a.f.attached, a.ifindex)
	if derr := a.f.objs.SandboxCfgs.Delete(uint32(a.ifindex)); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
		err = errors.Join(err, derr)
	}
	a.clearCounters()
	if err != nil {
		return fmt.Errorf("detach egress filter from ifindex %d: %w", a.ifindex, err)
	}
	return nil
}

func (a *Attachment) clearCounters() {
	for r := Reason(1); r <= maxReason; r++ {
		_ = a.f.objs.Drops.Delete(egressDropKey{Ifindex: uint32(a.ifindex), Reason: uint32(r)})
	}
}

// readCount sums the per-CPU drop counters of one {ifindex, reason}.
func (f *Filter) readCount(ifindex int, r Reason) (Count, bool, error) {
	var vals []egressDropVal
	err := f.objs.Drops.Lookup(egressDropKey{Ifindex: uint32(ifindex), Reason: uint32(r)}, &vals)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return Count{}, false, nil
	}
	if err != nil {
		return Count{}, false, err
	}
	var c Count
	var lastNs uint64
	for _, v := range vals {
		c.Packets += v.Packets
		if v.Packets > 0 && v.LastNs >= lastNs {
			lastNs = v.LastNs
			a := addrFrom16(v.LastAddr)
			if v.LastV6 != 0 {
				a = netip.AddrFrom16(v.LastAddr)
			}
			c.Last = netip.AddrPortFrom(a, v.LastPort)
			c.Protocol = Protocol(v.LastProto)
		}
	}
	return c, true, nil
}
