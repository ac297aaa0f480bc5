package model

import (
	"maps"
	"strings"

	"evals.si/spec"
	"evals.si/trajectory"
)

// Pricing maps a model name (or a name prefix) to its price in USD per
// million input and output tokens.
type Pricing map[string]spec.Price

// DefaultPricing returns list prices of common models, in USD per million
// tokens, as published by OpenAI and Anthropic when this table was written.
// Prices change: a run's harness.builtin.pricing overrides or extends these
// entries (see Merge). Keys match by exact name, then by the longest prefix,
// so dated snapshots ("claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06")
// take their family's price. Cached-input discounts are not modelled: all
// input tokens are charged at the input price.
func DefaultPricing() Pricing {
	return Pricing{
		// OpenAI
		"gpt-5":         {Input: 1.25, Output: 10},
		"gpt-5-mini":    {Input: 0.25, Output: 2},
		"gpt-5-nano":    {Input: 0.05, Output: 0.40},
		"gpt-4.1":       {Input: 2, Output: 8},
		"gpt-4.1-mini":  {Input: 0.40, Output: 1.60},
		"gpt-4.1-nano":  {Input: 0.10, Output: 0.40},
		"gpt-4o":        {Input: 2.50, Output: 10},
		"gpt-4o-mini":   {Input: 0.15, Output: 0.60},
		"gpt-4-turbo":   {Input: 10, Output: 30},
		"gpt-3.5-turbo": {Input: 0.50, Output: 1.50},
		"o1":            {Input: 15, Output: 60},
		"o1-mini":       {Input: 1.10, Output: 4.40},
		"o3":            {Input: 2, Output: 8},
		"o3-mini":       {Input: 1.10, Output: 4.40},
		"o3-pro":        {Input: 20, Output: 80},
		"o4-mini":       {Input: 1.10, Output: 4.40},
		// Anthropic
		"claude-opus-4":     {Input: 15, Output: 75},
		"claude-opus-4-1":   {Input: 15, Output: 75},
		"claude-opus-4-5":   {Input: 5, Output: 25},
		"claude-sonnet-4":   {Input: 3, Output: 15},
		"claude-sonnet-4-5": {Input: 3, Output: 15},
		"claude-haiku-4-5":  {Input: 1, Output: 5},
		"claude-3-7-sonnet": {Input: 3, Output: 15},
		"claude-3-5-sonnet": {Input: 3, Output: 15},
		"claude-3-5-haiku":  {Input: 0.80, Output: 4},
		"claude-3-haiku":    {Input: 0.25, Output: 1.25},
		"claude-3-opus":     {Input: 15, Output: 75},
		// The scripted connector's default model is free.
		ScriptedModel: {},
	}
}

// Merge returns a copy of p with the entries of over added or replacing
// p's (harness.builtin.pricing over DefaultPricing).
func (p Pricing) Merge(over map[string]spec.Price) Pricing {
	out := make(Pricing, len(p)+len(over))
	maps.Copy(out, p)
	maps.Copy(out, over)
	return out
}

// Lookup finds the price of a model, ignoring case: the exact name, else the longest key
// that is a prefix of the name at a boundary ("-", ".", ":", "@", "/" or
// the end), so "gpt-4o-mini-2024-07-18" is gpt-4o-mini, not gpt-4o, and
// "o3" does not price "o3x". A provider prefix ("openai/gpt-4o") is tried
// without its prefix too.
func (p Pricing) Lookup(model string) (spec.Price, bool) {
	for _, name := range candidates(model) {
		best, bestLen := spec.Price{}, -1
		for k, pr := range p {
			k = strings.ToLower(k)
			if k == name {
				return pr, true
			}
			if len(k) > bestLen && len(k) < len(name) && strings.HasPrefix(name, k) && strings.ContainsRune("-.:@/", rune(name[len(k)])) {
				best, bestLen = pr, len(k)
			}
		}
		if bestLen >= 0 {
			return best, true
		}
	}
	return spec.Price{}, false
}

func candidates(model string) []string {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndex(m, "/"); i >= 0 && i < len(m)-1 {
		return []string{m, m[i+1:]}
	}
	return []string{m}
}

// Cost is the USD cost of usage on model. known is false when the model
// has no price; the cost is then 0 (a scripted model costs 0 unless priced).
func (p Pricing) Cost(model string, u trajectory.Usage) (usd float64, known bool) {
	pr, ok := p.Lookup(model)
	if !ok {
		return 0, false
	}
	return (float64(u.InputTokens)*pr.Input + float64(u.OutputTokens)*pr.Output) / 1e6, true
}
