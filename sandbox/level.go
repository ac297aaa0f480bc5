package sandbox

import "fmt"

// Level is an isolation level; higher is stronger.
//
//	none       the host itself (the host rung, only when asked for)
//	process    the command runs as a host process restricted by Landlock and rlimits
//	namespaced own mount, PID, network, IPC, UTS and user namespaces (bubblewrap)
//	container  a container runtime's namespaces, cgroups and seccomp (docker, pod)
//	vm         a hardware-virtualised guest kernel (firecracker, smolvm)
type Level int

const (
	LevelNone Level = iota
	LevelProcess
	LevelNamespaced
	LevelContainer
	LevelVM
)

var levelNames = []string{"none", "process", "namespaced", "container", "vm"}

func (l Level) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return fmt.Sprintf("level(%d)", int(l))
	}
	return levelNames[l]
}

// ParseLevel parses a level name.
func ParseLevel(s string) (Level, error) {
	for i, n := range levelNames {
		if n == s {
			return Level(i), nil
		}
	}
	return 0, fmt.Errorf("unknown isolation level %q (one of process, namespaced, container, vm)", s)
}

// LevelNames lists the level names, weakest first.
func LevelNames() []string { return append([]string(nil), levelNames...) }

func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

func (l *Level) UnmarshalText(b []byte) error {
	v, err := ParseLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
