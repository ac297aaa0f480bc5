package execuser

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CheckMapped refuses a user whose ids the calling process's user
// namespace does not map: the kernel would refuse them too (EINVAL), and
// this says why. It reads /proc/self/uid_map and gid_map.
func CheckMapped(spec string, uid int, gids []int) error {
	ids := map[string][]int{"uid_map": {uid}, "gid_map": gids}
	for _, file := range []string{"uid_map", "gid_map"} {
		b, err := os.ReadFile("/proc/self/" + file)
		if err != nil {
			return fmt.Errorf("user %q: reading the sandbox's %s: %w", spec, file, err)
		}
		for _, id := range ids[file] {
			if !Mapped(string(b), id) {
				return fmt.Errorf("user %q: id %d is outside the ids this sandbox's user namespace maps (%s: %s); with a single-id map (an engine without a subordinate id range in /etc/subuid) no other user can run",
					spec, id, file, strings.Join(strings.Fields(string(b)), " "))
			}
		}
	}
	return nil
}

// Mapped reports whether id is inside one of an id map's ranges (the
// inside ids: each line is "inside outside count").
func Mapped(idmap string, id int) bool {
	for _, line := range strings.Split(idmap, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.Atoi(f[0])
		n, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil && id >= in && id-in < n {
			return true
		}
	}
	return false
}
