package embedded

import (
	"context"

	"evals.si/trajectory"
)

// AppendEvents writes a batch of a trial's events in one transaction; the
// engine's journal batches what a trial emitted while the last write ran.
func (r *recorder) AppendEvents(ctx context.Context, trialID string, evs []trajectory.Event) error {
	return r.store.AppendEvents(ctx, trialID, evs)
}
