package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FindPort is the device name (vport0p1) of the virtio-serial port called
// name, looked up under root's /sys/class/virtio-ports (root is "/" in the
// guest, a fake tree in tests).
func FindPort(root, name string) (string, error) {
	dir := filepath.Join(root, "sys/class/virtio-ports")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("looking for the control port %q: %w (is virtio_console loaded?)", name, err)
	}
	var seen []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "name"))
		if err != nil {
			continue
		}
		n := strings.TrimSpace(string(b))
		if n == name {
			return e.Name(), nil
		}
		seen = append(seen, e.Name()+"="+n)
	}
	return "", fmt.Errorf("no virtio-serial port is named %q under %s (found %q)", name, dir, seen)
}
