package model_test

import (
	"math"
	"testing"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

func TestPricingCost(t *testing.T) {
	p := model.DefaultPricing().Merge(map[string]spec.Price{
		"my-local-model": {Input: 0.5, Output: 1},
		"gpt-4o":         {Input: 2, Output: 8}, // an override replaces the default
	})
	million := trajectory.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}
	for _, tc := range []struct {
		model     string
		usage     trajectory.Usage
		wantUSD   float64
		wantKnown bool
	}{
		{"gpt-4o-mini", million, 0.15 + 0.60, true},
		{"gpt-4o-mini-2024-07-18", million, 0.15 + 0.60, true}, // longest prefix, not gpt-4o
		{"gpt-4o", million, 2 + 8, true},                       // overridden
		{"gpt-4o-2024-08-06", million, 2 + 8, true},
		{"gpt-4.1", trajectory.Usage{InputTokens: 500_000, OutputTokens: 250_000}, 1 + 2, true},
		{"gpt-4.1-mini", million, 0.40 + 1.60, true},
		{"gpt-5", trajectory.Usage{InputTokens: 2000, OutputTokens: 1000}, (2000*1.25 + 1000*10) / 1e6, true},
		{"o3", million, 2 + 8, true},
		{"o3-mini", million, 1.10 + 4.40, true},
		{"claude-sonnet-4-5-20250929", million, 3 + 15, true},
		{"claude-opus-4-20250514", million, 15 + 75, true},
		{"claude-opus-4-5", million, 5 + 25, true},
		{"claude-haiku-4-5-20251001", trajectory.Usage{InputTokens: 10_000}, 0.01, true},
		{"Claude-Sonnet-4", million, 18, true}, // case-insensitive
		{"openai/gpt-4o-mini", million, 0.75, true},
		{"my-local-model", trajectory.Usage{OutputTokens: 2_000_000}, 2, true},
		{"scripted", million, 0, true},
		{"o3x", million, 0, false}, // a prefix must end at a boundary
		{"llama-3-70b", million, 0, false},
		{"", million, 0, false},
	} {
		usd, known := p.Cost(tc.model, tc.usage)
		if known != tc.wantKnown || math.Abs(usd-tc.wantUSD) > 1e-9 {
			t.Errorf("Cost(%q, %+v) = %v, %v; want %v, %v", tc.model, tc.usage, usd, known, tc.wantUSD, tc.wantKnown)
		}
	}
	// Merge copies: the defaults are untouched.
	if pr, _ := model.DefaultPricing().Lookup("gpt-4o"); pr.Input != 2.5 {
		t.Errorf("default gpt-4o input price = %v after a merge", pr.Input)
	}
}
