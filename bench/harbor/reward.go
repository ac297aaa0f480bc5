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
	"strings"
	"unicode/utf8"

	"evals.si/bench/internal/pystr"
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

// ParseRewards reads Harbor's reward files as Harbor 0.25.0's verifier does
// (harbor/verifier/verifier.py, _parse_reward_json/_parse_reward_text, and
// VerifierResult's pydantic model): reward.json when it exists, even when
// reward.txt does too and even when reward.json is bad; else reward.txt.
// Every way the verifier produced no usable reward is an error: neither
// file, an empty file, text that is not UTF-8, JSON that is not an object
// of numbers (true and false count as 1 and 0, as pydantic coerces them),
// an object with no reward at all (TrialResult.reward_valid is then false),
// a reward.txt Python's float() does not read, and a non-finite number.
func ParseRewards(jsonData []byte, jsonOK bool, txtData []byte, txtOK bool) (map[string]float64, error) {
	switch {
	case jsonOK:
		if len(jsonData) == 0 {
			return nil, fmt.Errorf("%s is empty (Harbor: RewardFileEmptyError)", RewardJSON)
		}
		if !utf8.Valid(jsonData) {
			return nil, fmt.Errorf("%s is not UTF-8 text (Harbor: UnicodeDecodeError)", RewardJSON)
		}
		var raw any
		if err := json.Unmarshal(jsonData, &raw); err != nil {
			return nil, fmt.Errorf("%s is not JSON (Harbor: VerifierOutputParseError): %w", RewardJSON, err)
		}
		obj, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s holds %s, not a JSON object of rewards (Harbor: VerifierOutputParseError or a validation error)", RewardJSON, jsonKind(raw))
		}
		out := map[string]float64{}
		for k, v := range obj {
			switch v := v.(type) {
			case float64:
				out[k] = v
			case bool:
				out[k] = 0
				if v {
					out[k] = 1
				}
			default:
				return nil, fmt.Errorf("%s: reward %q is %s, not a number (Harbor: VerifierOutputParseError)", RewardJSON, k, jsonKind(v))
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s is an empty object: no reward (Harbor: reward_valid is false)", RewardJSON)
		}
		return out, nil
	case txtOK:
		if len(txtData) == 0 {
			return nil, fmt.Errorf("%s is empty (Harbor: RewardFileEmptyError)", RewardTxt)
		}
		if !utf8.Valid(txtData) {
			return nil, fmt.Errorf("%s is not UTF-8 text (Harbor: UnicodeDecodeError)", RewardTxt)
		}
		f, err := pyFloat(string(txtData))
		if err != nil {
			return nil, fmt.Errorf("%s holds %q: %v (Harbor: VerifierOutputParseError)", RewardTxt, txtData, err)
		}
		return map[string]float64{"reward": f}, nil
	}
	return nil, fmt.Errorf("the verifier wrote neither %s nor %s (Harbor: RewardFileNotFoundError)", RewardJSON, RewardTxt)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	case float64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// pyFloat is float(s) followed by Harbor's finiteness check.
func pyFloat(s string) (float64, error) {
	f, err := pystr.Float(s)
	switch {
	case err != nil:
		return 0, errors.New("not a number")
	case math.IsInf(f, 0) || math.IsNaN(f):
		return 0, errors.New("not a finite number")
	}
	return f, nil
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
