package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"evals.si/modelserver"
	"evals.si/spec"
)

// The live progress of `evalsi run` shows a provider that rate-limits the
// run: its adaptive window and how many 429s it answered.
func TestProgressShowsRateLimitedProvider(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every request is answered 429 once, then served (the SDK retries).
	srv := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "4", Status: 429}}}, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("EVALSI_PROGRESS_TEST_KEY", "not-secret")
	var recs strings.Builder
	for i := range 6 {
		fmt.Fprintf(&recs, "    - {id: q%d, input: \"2+2? (%d)\", expected: \"4\"}\n", i, i)
	}
	specPath := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(specPath, []byte("concurrency: 3\ndataset:\n  records:\n"+recs.String()+
		"target:\n  connector: openai\n  model: m\n  base_url: http://"+addr.String()+"/v1\n  api_key_env: EVALSI_PROGRESS_TEST_KEY\nevaluators: [exact-match]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	r := evalsi(t, filepath.Join(t.TempDir(), "evalsi.db"), "run", "-f", specPath)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Progress goes to stdout with the summary (not with --json). Not a
	// terminal: a line per finished trial, ending with the provider's state
	// once it has been limited.
	re := regexp.MustCompile(regexp.QuoteMeta("[openai "+addr.String()+": window ") + `(\d+), limited (\d+)×\]`)
	m := re.FindAllStringSubmatch(r.stdout, -1)
	if len(m) == 0 {
		t.Fatalf("no progress line shows the rate-limited provider:\n%s", r.stdout)
	}
	if last := m[len(m)-1]; last[2] == "0" {
		t.Errorf("last progress line says %q", last[0])
	}
}
