package docker

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pidsEventsFile finds the container's pids.events, whose "max" counter
// says how many forks the pids limit refused: cgroup v1 (cgroupfs driver)
// or v2 (cgroupfs or systemd driver). It is readable only when the daemon
// runs on this machine; "" otherwise, and the rung then cannot show a
// fork bomb as a denial.
func pidsEventsFile(id string) string {
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/pids/docker", id, "pids.events"),
		filepath.Join("/sys/fs/cgroup/docker", id, "pids.events"),
		filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+id+".scope", "pids.events"),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// pidsMaxEvents reads the "max" counter of a pids.events file (0 when it
// cannot be read).
func pidsMaxEvents(file string) int {
	if file == "" {
		return 0
	}
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "max "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
