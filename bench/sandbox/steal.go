package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTimes are the machine's CPU jiffies from the aggregate "cpu" line of
// /proc/stat: steal is time the hypervisor gave this VM's CPUs to others.
type cpuTimes struct{ steal, total uint64 }

// readCPUTimes reads /proc/stat's "cpu" line.
func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("reading CPU times: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPULine(line)
}

// parseCPULine parses "cpu user nice system idle iowait irq softirq steal
// [guest guest_nice]". The total is the first eight fields: guest time is
// already counted in user and nice.
func parseCPULine(line string) (cpuTimes, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("reading CPU times: /proc/stat's first line %q is not \"cpu\" and 8 counters", line)
	}
	var t cpuTimes
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("reading CPU times: counter %d of /proc/stat's cpu line: %w", i+1, err)
		}
		t.total += v
		if i == 7 {
			t.steal = v
		}
	}
	return t, nil
}

// stealShare is the share of CPU time stolen between a and b, in [0, 1];
// ok is false when no time passed.
func stealShare(a, b cpuTimes) (share float64, ok bool) {
	if b.total <= a.total || b.steal < a.steal {
		return 0, false
	}
	return float64(b.steal-a.steal) / float64(b.total-a.total), true
}
