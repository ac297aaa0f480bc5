package bwrap

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Bare runs argv under `bwrap --unshare-all --die-with-parent --new-session
// --cap-drop ALL --ro-bind / / --proc /proc --dev /dev` with an empty
// environment and nothing else: the floor a sandbox's command cost is
// measured against (bench/sandbox).
func (r *Rung) Bare(ctx context.Context, argv ...string) error {
	bw, err := r.bwrapPath()
	if err != nil {
		return err
	}
	args := append([]string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--"}, argv...)
	cmd := exec.CommandContext(ctx, bw, args...)
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bare bwrap %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
