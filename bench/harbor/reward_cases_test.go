package harbor

import (
	"maps"
	"testing"
)

// Harbor 0.25.0's reward reading (harbor/verifier/verifier.py) cannot run
// side by side with ParseRewards here: the module needs Python 3.12 to
// compile (typing.override, and f-strings with line breaks inside their
// braces), and these machines have 3.11. So these cases are written from
// its source instead, each with what the verifier and VerifierResult's
// pydantic model make of it; wantErr means Harbor raises (no reward).
//
//	_parse_reward_json: empty file -> RewardFileEmptyError; json.loads
//	  fails -> VerifierOutputParseError; a value that is not int/float
//	  (bool is an int) or not finite -> VerifierOutputParseError; a top
//	  level that is not an object fails pydantic (dict[str, float|int]),
//	  which turns true/false into 1.0/0.0; an empty object leaves
//	  TrialResult.reward_valid false.
//	_parse_reward_text: empty file -> RewardFileEmptyError; float(text)
//	  fails or is not finite -> VerifierOutputParseError.
//	verify: reward.json if it exists, else reward.txt, else
//	  RewardFileNotFoundError.
func TestParseRewardsAsHarbor(t *testing.T) {
	absent := "\x00absent"
	for _, c := range []struct {
		name, json, txt string
		want            map[string]float64
		wantErr         bool
	}{
		{name: "neither file", json: absent, txt: absent, wantErr: true},
		{name: "txt only", json: absent, txt: "1", want: map[string]float64{"reward": 1}},
		{name: "txt with whitespace", json: absent, txt: " \t0.25\n\n", want: map[string]float64{"reward": 0.25}},
		{name: "txt with Unicode spaces", json: absent, txt: "\u00a00.5\u3000\u2028\u0085", want: map[string]float64{"reward": 0.5}},
		{name: "txt with \\x1f, which float() does not strip", json: absent, txt: "0.5\x1f", wantErr: true},
		{name: "txt with a zero-width space", json: absent, txt: "\u200b0.5", wantErr: true},
		{name: "txt empty", json: absent, txt: "", wantErr: true},
		{name: "txt whitespace only", json: absent, txt: " \n", wantErr: true},
		{name: "txt with underscores", json: absent, txt: "0.000_1", want: map[string]float64{"reward": 0.0001}},
		{name: "txt misplaced underscore", json: absent, txt: "0._1", wantErr: true},
		{name: "txt Arabic-Indic digits", json: absent, txt: "٠.٥", want: map[string]float64{"reward": 0.5}},
		{name: "txt exponent", json: absent, txt: "5E-1", want: map[string]float64{"reward": 0.5}},
		{name: "txt leading dot and trailing dot", json: absent, txt: ".5", want: map[string]float64{"reward": 0.5}},
		{name: "txt trailing dot", json: absent, txt: "1.", want: map[string]float64{"reward": 1}},
		{name: "txt underflow is zero", json: absent, txt: "1e-400", want: map[string]float64{"reward": 0}},
		{name: "txt overflow is inf", json: absent, txt: "1e400", wantErr: true},
		{name: "txt nan", json: absent, txt: "nan", wantErr: true},
		{name: "txt inf", json: absent, txt: "-Infinity", wantErr: true},
		{name: "txt hexadecimal", json: absent, txt: "0x1p0", wantErr: true},
		{name: "txt two numbers", json: absent, txt: "1\n0", wantErr: true},
		{name: "txt a word", json: absent, txt: "PASSED", wantErr: true},
		{name: "txt JSON", json: absent, txt: `{"reward": 1}`, wantErr: true},
		{name: "txt not UTF-8", json: absent, txt: "1\xff", wantErr: true},
		{name: "json wins over txt", json: `{"reward": 0}`, txt: "1", want: map[string]float64{"reward": 0}},
		{name: "bad json does not fall back to txt", json: `{"reward": "1"}`, txt: "1", wantErr: true},
		{name: "empty json does not fall back to txt", json: "", txt: "1", wantErr: true},
		{name: "json whitespace only", json: " \n", txt: absent, wantErr: true},
		{name: "json several keys", json: `{"a": 1, "b": 0.5}`, txt: absent, want: map[string]float64{"a": 1, "b": 0.5}},
		{name: "json string value", json: `{"reward": "1.0"}`, txt: absent, wantErr: true},
		{name: "json null value", json: `{"reward": null}`, txt: absent, wantErr: true},
		{name: "json nested object", json: `{"reward": {"value": 1}}`, txt: absent, wantErr: true},
		{name: "json array value", json: `{"reward": [1]}`, txt: absent, wantErr: true},
		{name: "json true and false", json: `{"a": true, "b": false}`, txt: absent, want: map[string]float64{"a": 1, "b": 0}},
		{name: "json NaN", json: `{"reward": NaN}`, txt: absent, wantErr: true},
		{name: "json Infinity", json: `{"reward": -Infinity}`, txt: absent, wantErr: true},
		{name: "json overflow", json: `{"reward": 1e400}`, txt: absent, wantErr: true},
		{name: "json top-level number", json: `1`, txt: absent, wantErr: true},
		{name: "json top-level null", json: `null`, txt: absent, wantErr: true},
		{name: "json top-level array", json: `[1]`, txt: absent, wantErr: true},
		{name: "json empty object", json: `{}`, txt: absent, wantErr: true},
		{name: "json trailing data", json: `{"reward": 1} x`, txt: absent, wantErr: true},
		{name: "json duplicate key, last wins", json: `{"reward": 0, "reward": 1}`, txt: absent, want: map[string]float64{"reward": 1}},
		{name: "json with a BOM", json: "\ufeff{\"reward\": 1}", txt: absent, wantErr: true},
		{name: "json not UTF-8", json: "{\"r\xff\": 1}", txt: absent, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseRewards([]byte(c.json), c.json != absent, []byte(c.txt), c.txt != absent)
			switch {
			case c.wantErr && err == nil:
				t.Fatalf("got %v, want an error (Harbor records no reward)", got)
			case !c.wantErr && err != nil:
				t.Fatalf("error %v, want %v", err, c.want)
			case !c.wantErr && !maps.Equal(got, c.want):
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}
