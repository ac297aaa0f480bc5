package docker

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"evals.si/sandbox"
)

// TestSweepRemovesDeadOwnersSandboxes: the containers and snapshot images
// of an owner reported dead go, a live owner's stay, and so does a sandbox
// without an owner.
func TestSweepRemovesDeadOwnersSandboxes(t *testing.T) {
	r := requireDocker(t)
	ctx := context.Background()
	dead, alive := "test-owner-dead-"+t.Name(), "test-owner-alive-"+t.Name()
	mk := func(owner string) *Sandbox {
		t.Helper()
		sb, err := r.Create(ctx, sandbox.Config{Workdir: "/workspace", Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb.(*Sandbox)
	}
	setup := mk(dead)
	run(t, setup, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo x > /workspace/f"}})
	layer, err := setup.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.RemoveLayer(context.Background(), layer) })
	cli, _ := r.Client()
	if in, err := cli.ImageInspect(ctx, layer.Ref); err != nil || in.Config == nil || in.Config.Labels[labelOwner] != dead {
		t.Fatalf("the snapshot image does not carry its owner: %v", err)
	}
	trial := mk(dead)
	kept, unowned := mk(alive), mk("")

	n, err := r.Sweep(ctx, func(owner string) bool { return owner == dead })
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Errorf("swept %d, want at least the 2 containers and the snapshot image", n)
	}
	for _, c := range []struct {
		sb   *Sandbox
		gone bool
	}{{setup, true}, {trial, true}, {kept, false}, {unowned, false}} {
		_, err := cli.ContainerInspect(ctx, c.sb.id)
		if gone := err != nil; gone != c.gone {
			t.Errorf("container %s (owner %q): gone %v, want %v (%v)", short(c.sb.id), c.sb.cfg.Owner, gone, c.gone, err)
		}
	}
	if _, err := cli.ImageInspect(ctx, layer.Ref); err == nil {
		t.Errorf("the dead owner's snapshot image %s is still there", short(layer.Ref))
	}
	imgs, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelOwner+"="+dead))})
	if err != nil || len(imgs) != 0 {
		t.Errorf("snapshot images of the dead owner left: %d (%v)", len(imgs), err)
	}
	// The live owner's sandbox still works.
	if res := run(t, kept, sandbox.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("the live owner's sandbox: %+v", res)
	}
}
