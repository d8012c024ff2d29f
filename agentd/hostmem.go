package agentd

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// HostMemory reads MemTotal from /proc/meminfo, in bytes; 0 when it cannot.
func HostMemory() int64 {
	fh, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
