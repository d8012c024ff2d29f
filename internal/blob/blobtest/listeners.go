package blobtest

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// notLoopback lists the sockets process pid listens on (TCP) or has bound
// (UDP) at an address that is not a loopback one, from /proc.
func notLoopback(pid int) ([]string, error) {
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(proc, "fd"))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(proc, "fd", fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(filepath.Join(proc, "net", table))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !inodes[fs[9]] || strings.HasPrefix(table, "tcp") && fs[3] != "0A" {
				continue
			}
			ap, err := parseProcAddr(fs[1])
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", table, err)
			}
			if !ap.Addr().Unmap().IsLoopback() {
				out = append(out, table+" "+ap.String())
			}
		}
		f.Close()
	}
	return out, nil
}

// parseProcAddr parses /proc/net's "HEXADDR:HEXPORT", the address in
// 32-bit words of host (little-endian) order.
func parseProcAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(a)
	port, perr := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || perr != nil || len(b) != 4 && len(b) != 16 {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(b); i += 4 {
		binary.BigEndian.PutUint32(b[i:], binary.LittleEndian.Uint32(b[i:]))
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}
