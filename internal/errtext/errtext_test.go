package errtext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOneLine(t *testing.T) {
	dns := `step 1: openai chat completion for model "gpt-5" at https://api.openai.example/v1: Post "https://api.openai.example/v1/chat/completions": dial tcp: lookup api.openai.example: no such host`
	for _, tc := range []struct {
		name, msg string
		n         int
		want      string
	}{
		{"short enough", "resolving image x: fetching manifest: NAME_UNKNOWN", 160, "resolving image x: fetching manifest: NAME_UNKNOWN"},
		{"no limit", dns, 0, dns},
		{"lines joined", "setup step 1 (\"pip install x\") exited 1:\nERROR: no matching distribution\n", 160,
			`setup step 1 ("pip install x") exited 1: ERROR: no matching distribution`},
		{"keeps the root cause", dns, 160,
			`step 1: openai chat completion for model "gpt-5" at https://api.openai.example/v1 … dial tcp: lookup api.openai.example: no such host`},
		{"narrow", dns, 80,
			`step 1 … dial tcp: lookup api.openai.example: no such host`},
		{"one long segment", strings.Repeat("x", 100) + "END", 40,
			strings.Repeat("x", 12) + " … " + strings.Repeat("x", 20) + "END"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OneLine(tc.msg, tc.n)
			if got != tc.want {
				t.Errorf("OneLine(%d) =\n%s\nwant\n%s", tc.n, got, tc.want)
			}
			if tc.n > 0 && len(got) > tc.n {
				t.Errorf("%d bytes, over the limit %d", len(got), tc.n)
			}
		})
	}
}

// Cuts fall on rune boundaries.
func TestOneLineUTF8(t *testing.T) {
	msg := strings.Repeat("é", 60) + ": " + strings.Repeat("ü", 60)
	for n := 1; n < len(msg); n++ {
		if got := OneLine(msg, n); !utf8.ValidString(got) || len(got) > n {
			t.Fatalf("OneLine(%d) = %q (%d bytes)", n, got, len(got))
		}
	}
}
