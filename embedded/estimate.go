package embedded

import (
	"context"
	"path/filepath"
	"strings"

	"evals.si/engine"
	"evals.si/spec"
)

// Estimate works out what running f would spend, before anything runs:
// the dataset is loaded as Run loads it, nothing is stored, no trial or
// model call is made. o's caps (--max-cost) apply as they would to Run.
func (a *App) Estimate(ctx context.Context, f *spec.File, o RunOptions) (*engine.Estimate, error) {
	if err := o.budgetErr(); err != nil {
		return nil, err
	}
	records, err := a.planner.Records(ctx, f)
	if err != nil {
		return nil, err
	}
	name := f.Spec.Name
	if name == "" {
		// As the planner names a run.
		name = strings.TrimSuffix(filepath.Base(f.Path), filepath.Ext(f.Path))
	}
	return engine.EstimateRun(f.Spec, name, records, engine.RunBudgetOf(f.Spec, o.MaxCostUSD, o.MaxTokens)), nil
}
