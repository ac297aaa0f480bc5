package harbor

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"evals.si/bench/internal/benchdata"
	"evals.si/dataset"
	"evals.si/spec"
)

func TestImportSamples(t *testing.T) {
	dir := benchdata.Dir(t, "harbor")
	u, _ := url.Parse("harbor://.")
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range res.Records {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, ","); got != "hello-workdir,hello-world" {
		t.Errorf("imported %s", got)
	}
	if len(res.Refused) != 1 || res.Refused[0].Task != "hello-multi-step-simple" || !strings.Contains(res.Refused[0].Reason, "multi-step") {
		t.Errorf("refused %+v, want hello-multi-step-simple as multi-step", res.Refused)
	}
	for _, r := range res.Records {
		env, err := dataset.Environment(nil, r)
		if err != nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
		if env.Image != "ubuntu:24.04" || env.Checker.Parser != ParserReward || env.Checker.Files["/tests/test.sh"] == "" {
			t.Errorf("%s: env %+v checker %+v", r.ID, env, env.Checker)
		}
		if env.Sandbox.Network != "allow" {
			t.Errorf("%s: network %q", r.ID, env.Sandbox.Network)
		}
		if r.Metadata["solution"] == nil {
			t.Errorf("%s: no solution", r.ID)
		}
	}
	wd, _ := dataset.Environment(nil, res.Records[0])
	if wd.Sandbox.Workdir != "/custom-workdir" {
		t.Errorf("hello-workdir workdir %q", wd.Sandbox.Workdir)
	}
	if !strings.Contains(strings.Join(runs(wd.Setup), "\n"), "mkdir -p /custom-workdir") {
		t.Errorf("hello-workdir setup %q", wd.Setup)
	}
}

func TestSourceRefusesNamedTask(t *testing.T) {
	dir := benchdata.Dir(t, "harbor")
	reg := dataset.NewRegistry()
	Register(reg)
	u, _ := url.Parse("harbor://.?tasks=hello-multi-step-simple")
	_, err := reg.Load(context.Background(), specFile(dir, u.String()))
	if err == nil || !strings.Contains(err.Error(), "multi-step") {
		t.Errorf("got %v, want the multi-step refusal", err)
	}
}

func TestParseRewards(t *testing.T) {
	cases := []struct {
		name    string
		js      string
		jok     bool
		txt     string
		tok     bool
		want    float64
		wantErr bool
	}{
		{name: "txt", txt: " 1\n", tok: true, want: 1},
		{name: "json before txt", js: `{"reward": 0.25}`, jok: true, txt: "1", tok: true, want: 0.25},
		{name: "json mean of keys", js: `{"a": 1, "b": 0}`, jok: true, want: 0.5},
		{name: "neither", wantErr: true},
		{name: "empty txt", txt: "\n", tok: true, wantErr: true},
		{name: "bad txt", txt: "yes", tok: true, wantErr: true},
		{name: "json not object", js: `[1]`, jok: true, wantErr: true},
		{name: "json not number", js: `{"reward": "1"}`, jok: true, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseRewards([]byte(c.js), c.jok, []byte(c.txt), c.tok)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && Score(r) != c.want {
				t.Errorf("score %v, want %v", Score(r), c.want)
			}
		})
	}
}

func specFile(dir, uri string) *spec.File {
	return &spec.File{Spec: &spec.Spec{Dataset: spec.Dataset{URI: uri}}, Path: dir + "/spec.yaml", Dir: dir}
}

func runs(steps []spec.SetupStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.Run
	}
	return out
}
