// Package machine says how loaded the machine a benchmark runs on is, for
// the header and notes the bench commands print.
package machine

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// LoadAvg is the 1, 5 and 15 minute load averages, or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Busy says whether the 1-minute load average in load exceeds the CPU count.
func Busy(load string) bool {
	f := strings.Fields(load)
	if len(f) == 0 {
		return false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return err == nil && v > float64(runtime.NumCPU())
}
