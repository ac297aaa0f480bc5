package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"evals.si/internal/testenv"
	"evals.si/sandbox/docker"
	"evals.si/sandbox/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// testdata/inspect-log.json is a real log: inspect-ai 0.3.285 running
// inspect_task.py with two samples on this machine's Docker.
func readTestLog(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/inspect-log.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseInspectLog(t *testing.T) {
	lg, err := parseInspectLog(readTestLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if lg.version != "0.3.285" {
		t.Errorf("version %q, want 0.3.285", lg.version)
	}
	if len(lg.latencies) != 2 || lg.passed != 2 {
		t.Fatalf("%d samples, %d passed; want 2 and 2", len(lg.latencies), lg.passed)
	}
	// Sample t00000: its first event (the sandbox's start, before its
	// started_at) at 17:16:41.471836, completed_at 17:16:46.054530.
	if want := 4582694 * time.Microsecond; lg.latencies[0] != want {
		t.Errorf("first sample's latency %s, want %s (first event to completed_at)", lg.latencies[0], want)
	}
	if lg.span < lg.latencies[0] || lg.span < lg.latencies[1] {
		t.Errorf("span %s shorter than a sample (%s)", lg.span, lg.latencies)
	}
}

func TestParseInspectLogRejects(t *testing.T) {
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(readTestLog(t), &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sample := func(m map[string]any) map[string]any { return m["samples"].([]any)[0].(map[string]any) }
	for _, tc := range []struct {
		name string
		log  []byte
		want string
	}{
		{"not json", []byte("<html>"), "not an Inspect JSON log"},
		{"eval error", edit(func(m map[string]any) {
			m["status"] = "error"
			m["error"] = map[string]any{"message": "PrerequisiteError: Docker Engine >= 24.0.6"}
		}), `eval status "error", want "success": PrerequisiteError: Docker Engine >= 24.0.6`},
		{"sample error", edit(func(m map[string]any) { sample(m)["error"] = map[string]any{"message": "compose up failed"} }), "sample t00000 failed: compose up failed"},
		{"bad completed_at", edit(func(m map[string]any) { sample(m)["completed_at"] = "yesterday" }), `sample t00000: completed_at "yesterday"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseInspectLog(tc.log)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(5, 1, 3, 2, 4), 0.5, 3 * time.Millisecond},
		{ms(4, 3, 2, 1), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 100), 0.99, 100 * time.Millisecond},
	} {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}

func TestSatisfies(t *testing.T) {
	for _, tc := range []struct {
		version, spec string
		want          bool
		err           string
	}{
		{"3.11.7", ">=3.12", false, ""},
		{"3.12.0", ">=3.12", true, ""},
		{"3.12", ">=3.12.0", true, ""},
		{"3.13.1", ">=3.10,<3.13", false, ""},
		{"3.11.2", ">=3.10, <4", true, ""},
		{"3.11.2", "!=3.11.2", false, ""},
		{"3.11.2", "~=3.11", false, `clause "~=3.11" has no comparison operator`},
		{"3.12.0rc1", ">=3.12", false, `"0rc1" is not a number`},
	} {
		got, err := satisfies(tc.version, tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("satisfies(%q, %q): error %v, want %q", tc.version, tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("satisfies(%q, %q) = %v, %v; want %v", tc.version, tc.spec, got, err, tc.want)
		}
	}
}

func TestOlderThan(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"20.10.24+dfsg1", "24.0.6", true},
		{"24.0.6", "24.0.6", false},
		{"27.5.1", "24.0.6", false},
		{"25.0.0-rc.1", "24.0.6", false},
	} {
		got, err := olderThan(tc.a, tc.b)
		if err != nil || got != tc.want {
			t.Errorf("olderThan(%q, %q) = %v, %v; want %v", tc.a, tc.b, got, err, tc.want)
		}
	}
}

// fakePython writes an executable python3 that prints the given
// --version line.
func fakePython(t *testing.T, line string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+line+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeWheel puts a harbor wheel whose METADATA says requires into the
// cache, where harborPeer looks before downloading one.
func fakeWheel(t *testing.T, cache, requires string) {
	t.Helper()
	dir := filepath.Join(cache, "harbor-"+harborVersion+"-wheel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "harbor-"+harborVersion+"-py3-none-any.whl"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	m, err := zw.Create("harbor-" + harborVersion + ".dist-info/METADATA")
	if err != nil {
		t.Fatal(err)
	}
	m.Write([]byte("Metadata-Version: 2.4\nName: harbor\nVersion: " + harborVersion + "\nRequires-Dist: pydantic>=2.12.0\nRequires-Python: " + requires + "\n\nA long description.\nRequires-Python: not this one\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestHarborPythonCheck(t *testing.T) {
	for _, tc := range []struct {
		name, version, requires, want string
	}{
		{"too old", "Python 3.11.4", ">=3.12", "not measured: harbor 0.25.0 requires Python >=3.12; this machine has 3.11.4"},
		{"new enough", "Python 3.12.1", ">=3.12", "not measured: Python 3.12.1 could install harbor 0.25.0, but bench/peers has no Harbor runner yet"},
		{"not python", "command not found", ">=3.12", `not measured: ` + "PYTHON" + ` --version printed "command not found", want "Python X.Y.Z"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			fakeWheel(t, cache, tc.requires)
			py := fakePython(t, tc.version)
			r := harborPeer(context.Background(), options{python: py, cache: cache})
			if want := strings.ReplaceAll(tc.want, "PYTHON", py); r.skipped != want {
				t.Errorf("skipped %q\nwant    %q", r.skipped, want)
			}
		})
	}
}

// TestHarborRealMetadata reads the real wheel .ci/setup fetches
// (python/adapters/reference/fetch-wheels.sh): Harbor 0.25.0 needs 3.12.
func TestHarborRealMetadata(t *testing.T) {
	whl := "../../python/adapters/reference/wheels/harbor-0.25.0-py3-none-any.whl"
	if _, err := os.Stat(whl); err != nil {
		testenv.Missing(t, "harbor wheel", "python/adapters/reference/fetch-wheels.sh downloads it")
	}
	req, err := wheelRequiresPython(whl)
	if err != nil {
		t.Fatal(err)
	}
	if req != harborKnownRequires {
		t.Errorf("Requires-Python %q, want %q", req, harborKnownRequires)
	}
}

func TestComposeFile(t *testing.T) {
	var c struct {
		Services map[string]map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(composeFile("evalsi-bench-peers:abc", "run1")), &c); err != nil {
		t.Fatal(err)
	}
	s, ok := c.Services["default"]
	if !ok || len(c.Services) != 1 {
		t.Fatalf("services %v, want one named default (Inspect's default sandbox)", c.Services)
	}
	for k, want := range map[string]any{"image": "evalsi-bench-peers:abc", "pull_policy": "never", "x-local": true, "network_mode": "none", "working_dir": "/workspace"} {
		if s[k] != want {
			t.Errorf("%s = %v, want %v", k, s[k], want)
		}
	}
	if l, _ := s["labels"].(map[string]any); l[peerLabel] != "run1" {
		t.Errorf("labels %v, want %s: run1", s["labels"], peerLabel)
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		peers []string
		err   string
	}{
		{nil, []string{"inspect", "harbor"}, ""},
		{[]string{"-peers", "harbor"}, []string{"harbor"}, ""},
		{[]string{"-peers", ""}, nil, ""},
		{[]string{"-peers", "inspect,swe-agent"}, nil, `-peers: unknown peer "swe-agent"; the peers are inspect and harbor`},
		{[]string{"-n", "0"}, nil, "-n and -concurrency must be positive"},
		{[]string{"extra"}, nil, `unexpected arguments ["extra"]`},
	} {
		o, err := parseFlags(tc.args)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("parseFlags(%q): error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(o.peers, ",") != strings.Join(tc.peers, ",") {
			t.Errorf("parseFlags(%q) = peers %q, %v; want %q", tc.args, o.peers, err, tc.peers)
		}
	}
}

// flat collapses the tabwriter's alignment to single spaces.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestReport(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	h := header{when: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), cpus: 2, load: "0.50 0.40 0.30", osArch: "linux/amd64",
		python: "3.11.7", docker: "20.10.24", compose: "2.40.3", n: 4, conc: 4, command: "cat greeting.txt", check: "grep -q hello greeting.txt",
		peerVersion: map[string]string{"inspect-ai": "0.3.285", "harbor": "0.25.0"}}
	self := &result{harness: evalsiName, version: "embedded", sandbox: "bwrap", trials: 4, passed: 4, wall: time.Second, span: time.Second, latencies: ms(10, 20, 30, 40)}
	slow := &result{harness: "Inspect AI", version: "0.3.285", sandbox: "docker", trials: 4, passed: 4, wall: 10 * time.Second, span: 8 * time.Second, latencies: ms(200, 300, 400, 500),
		notes: []string{"engine check skipped"}}
	fast := &result{harness: "Inspect AI", version: "0.3.285", sandbox: "docker", trials: 4, passed: 4, wall: 500 * time.Millisecond, latencies: ms(1, 2, 3, 4)}
	harbor := &result{harness: "Harbor", version: "0.25.0", sandbox: "docker", skipped: "not measured: harbor 0.25.0 requires Python >=3.12; this machine has 3.11.7"}
	for _, tc := range []struct {
		name    string
		results []*result
		want    []string
	}{
		{"ahead", []*result{self, slow, harbor}, []string{
			"evalsi peers benchmark: 2026-12-03T12:00:00Z, 2 CPUs, load 0.50 0.40 0.30, linux/amd64",
			"peers: inspect-ai==0.3.285, harbor==0.25.0",
			"4 trials at concurrency 4",
			"Evals.si embedded bwrap 4 4 1.00 s 4.00 20.0 ms 40.0 ms 1.00 s",
			"Inspect AI 0.3.285 docker 4 4 10.00 s 0.40 300.0 ms 500.0 ms 8.00 s",
			"Harbor 0.25.0 docker not measured",
			"Harbor: not measured: harbor 0.25.0 requires Python >=3.12; this machine has 3.11.7",
			"Evals.si trials/s ÷ Inspect AI trials/s 10.0× > 1× (Evals.si ahead) yes",
			"Inspect AI p50 ÷ Evals.si p50 15.0× > 1× (Evals.si ahead) yes",
			"Evals.si trials/s ÷ Harbor trials/s not measured",
			"note: Inspect AI: engine check skipped",
			"load after the run: 0.10 0.10 0.10",
		}},
		{"behind", []*result{self, fast}, []string{
			"Evals.si trials/s ÷ Inspect AI trials/s 0.5× > 1× (Evals.si ahead) NO",
			"Inspect AI p50 ÷ Evals.si p50 0.1× > 1× (Evals.si ahead) NO",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printReport(&b, h, tc.results, "0.10 0.10 0.10")
			got := flat(b.String())
			for _, w := range tc.want {
				if !strings.Contains(got, flat(w)) {
					t.Errorf("report lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// TestLive runs the benchmark with -n 2: Evals.si and Inspect AI measured
// for real, Harbor's row decided. It installs inspect-ai from PyPI (once,
// into the cache) and builds docker compose (once), so it runs only with
// EVALSI_BENCH_PEERS=1.
func TestLive(t *testing.T) {
	if os.Getenv("EVALSI_BENCH_PEERS") != "1" {
		t.Skip("set EVALSI_BENCH_PEERS=1 to run the peers for real (installs inspect-ai from PyPI; minutes)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "Evals.si's trials run on the bwrap rung")
	}
	if p := docker.New().Probe(context.Background()); !p.Works {
		testenv.Missing(t, "docker", p.Reason)
	}
	o, err := parseFlags([]string{"-n", "2"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := flat(out.String())
	for _, w := range []string{
		"2 trials at concurrency",
		"Evals.si embedded bwrap rung, from the setup snapshot 2 2",
		"Inspect AI 0.3.285 docker compose project per sample 2 2",
		"Evals.si trials/s ÷ Inspect AI trials/s",
		"Harbor 0.25.0",
	} {
		if !strings.Contains(got, flat(w)) {
			t.Errorf("report lacks %q:\n%s", w, out.String())
		}
	}
}
