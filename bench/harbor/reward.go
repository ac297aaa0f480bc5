package harbor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"evals.si/checker"
	"evals.si/sandbox"
	"evals.si/spec"
)

// ParserReward is the registered name of Harbor's reward grader.
const ParserReward = "evalsi_harbor:reward"

// Reward file paths inside the sandbox.
const (
	RewardJSON = "/logs/verifier/reward.json"
	RewardTxt  = "/logs/verifier/reward.txt"
)

// RegisterParsers adds Harbor's grader to reg.
func RegisterParsers(reg *checker.Registry) {
	reg.Register(ParserReward, rewardVerdict)
}

// ParseRewards reads Harbor's reward files as its verifier does
// (upstream since 2026-05): reward.json when present (a JSON object of
// numbers), else reward.txt (one number; surrounding whitespace allowed).
// Neither present, an empty reward.txt and unparsable content are errors:
// the verifier produced no reward.
func ParseRewards(jsonData []byte, jsonOK bool, txtData []byte, txtOK bool) (map[string]float64, error) {
	switch {
	case jsonOK:
		var raw map[string]any
		if err := json.Unmarshal(jsonData, &raw); err != nil {
			return nil, fmt.Errorf("%s is not a JSON object: %w", RewardJSON, err)
		}
		out := map[string]float64{}
		for k, v := range raw {
			f, ok := v.(float64)
			if !ok {
				return nil, fmt.Errorf("%s: reward %q is %T, not a number", RewardJSON, k, v)
			}
			out[k] = f
		}
		return out, nil
	case txtOK:
		s := strings.TrimSpace(string(txtData))
		if s == "" {
			return nil, fmt.Errorf("%s is empty (Harbor: RewardFileEmptyError)", RewardTxt)
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) {
			return nil, fmt.Errorf("%s holds %q, not a number (Harbor: VerifierOutputParseError)", RewardTxt, s)
		}
		return map[string]float64{"reward": f}, nil
	}
	return nil, fmt.Errorf("the verifier wrote neither %s nor %s (Harbor: RewardFileNotFoundError)", RewardJSON, RewardTxt)
}

// Score is the trial's score: the "reward" key, or the only key, or the
// mean of all keys (Harbor's mean metric per key, for one trial).
func Score(rewards map[string]float64) float64 {
	if r, ok := rewards["reward"]; ok {
		return r
	}
	if len(rewards) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range rewards {
		sum += v
	}
	return sum / float64(len(rewards))
}

func rewardVerdict(ctx context.Context, _ sandbox.ExecResult, sb checker.Sandbox, _ string, _ spec.JSON) (checker.Verdict, error) {
	read := func(p string) ([]byte, bool, error) {
		b, err := sb.ReadFile(ctx, p)
		if err == nil {
			return b, true, nil
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, &checker.InfraError{Reason: "reading " + p, Err: err}
	}
	jb, jok, err := read(RewardJSON)
	if err != nil {
		return checker.Verdict{}, err
	}
	tb, tok, err := read(RewardTxt)
	if err != nil {
		return checker.Verdict{}, err
	}
	rewards, err := ParseRewards(jb, jok, tb, tok)
	if err != nil {
		return checker.Verdict{}, &checker.InfraError{Reason: "Harbor verifier", Err: err}
	}
	score := Score(rewards)
	if score < 0 || score > 1 {
		return checker.Verdict{}, &checker.InfraError{Reason: fmt.Sprintf("Harbor reward %v is outside [0, 1], which a score must be in", score)}
	}
	keys := make([]string, 0, len(rewards))
	for k := range rewards {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, rewards[k])
	}
	return checker.Verdict{Pass: score >= 1, Score: score, Details: "rewards: " + strings.Join(parts, ", ")}, nil
}
