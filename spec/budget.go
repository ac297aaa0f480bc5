package spec

import "math"

// runBudget checks the top-level budget: the run-wide stop conditions
// (the engine's RunBudget). Each is positive, or absent for no limit.
func (v *validator) runBudget(b *Budget) {
	if b == nil {
		return
	}
	// Zero means "no limit" in the type, so a budget whose every limit is
	// zero (a template that rendered usd: 0) would silently cap nothing.
	if b.USD == 0 && b.Tokens == 0 && b.WallClock == 0 {
		v.add("budget", "give budget.usd, budget.tokens or budget.wall_clock a positive value, or remove budget for no cap",
			"budget sets no limit: its usd, tokens and wall_clock are all 0 or absent, and 0 means no limit")
	}
	if b.USD < 0 || math.IsNaN(b.USD) || math.IsInf(b.USD, 0) {
		v.add("budget.usd", "budget.usd caps the whole run's spend in USD (e.g. usd: 5); leave it out for no cap",
			"budget.usd must be a positive amount, or absent for no cap (it is %v)", b.USD)
	}
	if b.Tokens < 0 {
		v.add("budget.tokens", "budget.tokens caps the whole run's tokens (e.g. tokens: 2000000); leave it out for no cap",
			"budget.tokens must be positive, or absent for no cap (it is %d)", b.Tokens)
	}
	if b.WallClock < 0 {
		v.add("budget.wall_clock", "budget.wall_clock bounds how long the run starts trials (e.g. wall_clock: 2h); leave it out for no limit",
			"budget.wall_clock must be positive, or absent for no limit (it is %s)", b.WallClock.D())
	}
}
