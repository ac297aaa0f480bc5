package terminalbench

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"evals.si/bench/internal/benchdata"
	"evals.si/dataset"
	"evals.si/spec"
)

func importURI(t *testing.T, raw string) (*spec.Environment, []spec.Record) {
	t.Helper()
	dir := benchdata.Dir(t, "terminal-bench")
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refused) > 0 {
		t.Fatalf("refused: %v", res.Refused)
	}
	if len(res.Records) == 0 {
		t.Fatal("no records")
	}
	env, err := dataset.Environment(nil, res.Records[0])
	if err != nil {
		t.Fatalf("the record's environment does not load: %v", err)
	}
	return env, res.Records
}

func TestImportSamples(t *testing.T) {
	_, recs := importURI(t, "terminal-bench://.")
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	want := "aider_polyglot/polyglot_javascript_space-age,aider_polyglot/polyglot_python_transpose,evoeval/76"
	if got := strings.Join(ids, ","); got != want {
		t.Errorf("imported %s, want %s", got, want)
	}
}

func TestImportTranspose(t *testing.T) {
	env, recs := importURI(t, "terminal-bench://.?tasks=polyglot_python_transpose")
	r := recs[0]
	if !strings.Contains(r.Input.Text, "Given an input text output it transposed") {
		t.Errorf("input %q", r.Input.Text[:60])
	}
	if env.Image != "buildpack-deps:jammy" {
		t.Errorf("image %q", env.Image)
	}
	if env.Sandbox == nil || env.Sandbox.Workdir != "/app" || env.Sandbox.Network != "allow" {
		t.Errorf("sandbox %+v", env.Sandbox)
	}
	if env.Env["TEST_DIR"] != "/tests" || env.Env["LC_ALL"] != "C.UTF-8" {
		t.Errorf("env %v", env.Env)
	}
	if env.Files["/app/transpose.py"] == "" || env.Files["/app/.oracle/solution.enc.evalsi-b64"] == "" {
		t.Errorf("workspace files not placed: %v", keys(env.Files))
	}
	if len(env.Setup) < 5 || !strings.Contains(env.Setup[0].Run, "base64 -d") {
		t.Errorf("setup %q", env.Setup)
	}
	c := env.Checker
	if c == nil || c.Parser != ParserPytest || c.Files["/tests/run-tests.sh"] == "" || c.Files["/tests/transpose_test.py"] == "" {
		t.Fatalf("checker %+v", c)
	}
	if got := strings.Join(c.Command, " "); !strings.Contains(got, "timeout -k 10 1800 bash /tests/run-tests.sh >") {
		t.Errorf("checker command %q", got)
	}
	if c.Timeout.D().Seconds() != 1800+60 {
		t.Errorf("checker timeout %v", c.Timeout.D())
	}
	if r.Metadata["solution"] == nil {
		t.Error("no solution metadata")
	}
}

func TestImportImageAndNetworkQuery(t *testing.T) {
	env, _ := importURI(t, "terminal-bench://.?tasks=evoeval/76&image=oci-layout:/x&network=deny")
	if env.Image != "oci-layout:/x" {
		t.Errorf("image %q", env.Image)
	}
	for _, s := range env.Setup {
		if strings.Contains(s.Run, "apt-get") || strings.Contains(s.Run, "pip") {
			t.Errorf("image= must drop the RUN steps, found %q", s)
		}
	}
	if env.Sandbox.Network != "deny" || env.SetupNetwork == "allow" {
		t.Errorf("network=deny not applied: %+v setup_network=%q", env.Sandbox, env.SetupNetwork)
	}
}

func TestImportErrors(t *testing.T) {
	dir := benchdata.Dir(t, "terminal-bench")
	for _, raw := range []string{
		"terminal-bench://.?tasks=nope",
		"terminal-bench://.?bogus=1",
		"terminal-bench://.?network=allow",
		"terminal-bench://nothere",
	} {
		u, _ := url.Parse(raw)
		if _, err := (Importer{}).Import(context.Background(), u, dir); err == nil {
			t.Errorf("%s: no error", raw)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
