package docker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
)

// daemonFacts is what the rung needs to know of its daemon, which does not
// change while the daemon runs.
type daemonFacts struct {
	host      string   // the daemon's address, for messages
	uidMap    []string // Report.UIDMap
	driver    string   // storage driver
	rootDir   string   // DockerRootDir (a remapped root's own)
	backingFS string   // the driver's backing filesystem, when it says
}

// daemonInfo asks the daemon what it is and refuses it unless root in its
// containers is an unprivileged uid on the host (daemonUIDMap).
func daemonInfo(ctx context.Context, cli *client.Client) (*daemonFacts, error) {
	info, err := cli.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking the docker daemon at %s how it maps container ids: %w", cli.DaemonHost(), err)
	}
	f := &daemonFacts{host: cli.DaemonHost(), driver: info.Driver, rootDir: info.DockerRootDir}
	for _, kv := range info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			f.backingFS = kv[1]
		}
	}
	if f.uidMap, err = daemonUIDMap(f.host, info); err != nil {
		return nil, err
	}
	return f, nil
}

// daemonUIDMap checks that root in the daemon's containers is an
// unprivileged uid on the host, and describes the mapping (Report.UIDMap).
// A daemon without user-namespace remapping runs containers as host root:
// one kernel bug or misconfigured mount from owning the host, so the rung
// refuses it rather than say so in a note.
func daemonUIDMap(host string, info system.Info) ([]string, error) {
	var userns, rootless bool
	for _, o := range info.SecurityOptions {
		switch {
		case strings.HasPrefix(o, "name=userns"):
			userns = true
		case strings.HasPrefix(o, "name=rootless"):
			rootless = true
		}
	}
	switch {
	case rootless:
		return []string{"rootless Docker: container ids map into the daemon user's subordinate ranges; root inside is the daemon's unprivileged user"}, nil
	case userns:
		return remapRange(info.DockerRootDir, "/etc/subuid"), nil
	}
	return nil, fmt.Errorf("the docker daemon at %s runs containers without user-namespace remapping, so root in a sandbox would be root on the host; "+
		`set "userns-remap": "default" in /etc/docker/daemon.json and restart dockerd (.ci/setup does this), or use rootless Docker`, host)
}

// remapRange describes a userns-remap daemon's mapping. Its root directory
// is named after the remapped root ("/var/lib/docker/100000.100000"); the
// range's size is the subordinate range starting there (dockremap's, for
// "default").
func remapRange(rootDir, subuid string) []string {
	base, _, ok := strings.Cut(filepath.Base(rootDir), ".")
	start, err := strconv.Atoi(base)
	if !ok || err != nil {
		return []string{"docker userns-remap: root inside is an unprivileged uid outside (the daemon's remap range; not readable here)"}
	}
	if f, err := os.Open(subuid); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
			if len(parts) != 3 {
				continue
			}
			s, err1 := strconv.Atoi(parts[1])
			n, err2 := strconv.Atoi(parts[2])
			if err1 == nil && err2 == nil && s == start && n > 0 {
				return []string{fmt.Sprintf("0-%d -> %d-%d", n-1, start, start+n-1)}
			}
		}
	}
	return []string{fmt.Sprintf("0 -> %d (docker userns-remap; the range's size is not in %s here)", start, subuid)}
}
