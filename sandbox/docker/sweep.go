package docker

import (
	"context"
	"errors"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"evals.si/sandbox"
)

// Labels on every sandbox container; a snapshot image inherits them from
// the container it was committed from.
const (
	labelSandbox = "si.evals.sandbox"
	labelOwner   = "si.evals.owner"
)

func sandboxLabels(cfg sandbox.Config) map[string]string {
	l := map[string]string{labelSandbox: "1"}
	if cfg.Owner != "" {
		l[labelOwner] = cfg.Owner
	}
	return l
}

var _ sandbox.Sweeper = (*Rung)(nil)

// Sweep removes the sandbox containers, then the snapshot images, whose
// owner dead reports as gone: a killed engine's containers otherwise keep
// running (their keeper sleeps forever) and its snapshots stay. Containers
// and images without an owner label are never touched. A daemon that
// cannot be reached has nothing to sweep.
func (r *Rung) Sweep(ctx context.Context, dead func(owner string) bool) (int, error) {
	cli, err := r.Client()
	if err != nil {
		return 0, nil
	}
	f := filters.NewArgs(filters.Arg("label", labelOwner))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		if client.IsErrConnectionFailed(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("listing docker sandboxes: %w", err)
	}
	n := 0
	var errs []error
	for _, c := range cs {
		if !dead(c.Labels[labelOwner]) {
			continue
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			// Gone, or another engine's sweep is removing it right now.
			if !client.IsErrNotFound(err) && !errdefs.IsConflict(err) {
				errs = append(errs, fmt.Errorf("removing docker sandbox %s: %w", short(c.ID), err))
			}
			continue
		}
		n++
	}
	imgs, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: f})
	if err != nil {
		return n, errors.Join(append(errs, fmt.Errorf("listing docker snapshot images: %w", err))...)
	}
	var left []string
	for _, im := range imgs {
		if dead(im.Labels[labelOwner]) {
			left = append(left, im.ID)
		}
	}
	// A read-only-root snapshot is an image made from another snapshot:
	// the parent cannot go before its child, and the list is in no order,
	// so what failed is tried once more after the rest.
	for attempt := range 2 {
		var failed []string
		for _, id := range left {
			_, err := cli.ImageRemove(ctx, id, image.RemoveOptions{Force: true, PruneChildren: true})
			switch {
			case err == nil:
				n++
			case client.IsErrNotFound(err):
				// Gone already, as the untagged parent of one removed.
			case attempt == 0:
				failed = append(failed, id)
			default:
				errs = append(errs, fmt.Errorf("removing docker snapshot image %s: %w", short(id), err))
			}
		}
		left = failed
	}
	return n, errors.Join(errs...)
}
