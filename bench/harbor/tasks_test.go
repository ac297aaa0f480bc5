package harbor

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/bench/importer"
	"evals.si/dataset"
	"evals.si/spec"
)

// task writes a Harbor task folder: task.toml, instruction.md,
// tests/test.sh, and the environment files given (Dockerfile, …).
func task(t *testing.T, root, name, toml string, envFiles map[string]string) {
	t.Helper()
	files := map[string]string{
		"task.toml":      toml,
		"instruction.md": "Do the thing.\n",
		"tests/test.sh":  "echo 1 > /logs/verifier/reward.txt\n",
	}
	for k, v := range envFiles {
		files["environment/"+k] = v
	}
	for p, data := range files {
		full := filepath.Join(root, name, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func importDir(t *testing.T, dir, query string) *importer.Result {
	t.Helper()
	u, err := url.Parse("harbor://." + query)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// envOf is a record's environment as the engine loads it (validated).
func envOf(t *testing.T, res *importer.Result, id string) *spec.Environment {
	t.Helper()
	for _, r := range res.Records {
		if r.ID == id {
			env, err := dataset.Environment(nil, r)
			if err != nil {
				t.Fatalf("%s: the record's environment does not load: %v", id, err)
			}
			return env
		}
	}
	t.Fatalf("%s not imported; refused: %+v", id, res.Refused)
	return nil
}

func refusal(res *importer.Result, id string) string {
	for _, r := range res.Refused {
		if r.Task == id {
			return r.Reason
		}
	}
	return ""
}

// TestUsers: [agent].user is the environment's user and [verifier].user the
// checker's, each falling back to the Dockerfile's USER; the checker's is
// explicit whenever it differs from the agent's, root included. RUN steps
// after USER run as that user.
func TestUsers(t *testing.T) {
	dir := t.TempDir()
	df := "FROM ubuntu:24.04\nRUN useradd -m app\nUSER app\nRUN touch /home/app/x\n"
	task(t, dir, "agent-user", "[agent]\nuser = \"agent\"\n", map[string]string{"Dockerfile": "FROM ubuntu:24.04\nRUN useradd -m agent\n"})
	task(t, dir, "image-user", "[verifier]\nuser = 0\n", map[string]string{"Dockerfile": df})
	task(t, dir, "both", "[agent]\nuser = \"agent\"\n[verifier]\nuser = \"app\"\n", map[string]string{"Dockerfile": df})
	task(t, dir, "same", "[agent]\nuser = \"app\"\n", map[string]string{"Dockerfile": df})
	res := importDir(t, dir, "")
	cases := []struct{ id, env, checker string }{
		{"agent-user", "agent", "root"}, // the verifier keeps the image's (root) user
		{"image-user", "app", "0"},
		{"both", "agent", "app"},
		{"same", "app", ""},
	}
	for _, c := range cases {
		env := envOf(t, res, c.id)
		if env.User != c.env || env.Checker.User != c.checker {
			t.Errorf("%s: environment user %q checker user %q, want %q and %q", c.id, env.User, env.Checker.User, c.env, c.checker)
		}
	}
	env := envOf(t, res, "image-user")
	var users []string
	for _, s := range env.Setup {
		users = append(users, s.User)
	}
	if !slices.Equal(users, []string{"", "app", ""}) {
		t.Errorf("setup users %q: want useradd as root, touch as app, Harbor's /logs as root", users)
	}
	if last := env.Setup[len(env.Setup)-1].Run; !strings.Contains(last, "chmod 777 /logs/agent /logs/verifier") {
		t.Errorf("last setup step %q: /logs must be writable by a non-root agent and verifier", last)
	}
}

// TestServiceAndHealthcheck: the image's ENTRYPOINT runs as the service
// with the command Harbor's compose file gives main (or the task
// compose's own); a CMD alone is replaced by sleep, so no service;
// [environment.healthcheck] is run with bash -c and Harbor's defaults, as
// the container's user when the agent's differs.
func TestServiceAndHealthcheck(t *testing.T) {
	dir := t.TempDir()
	task(t, dir, "entrypoint", `[agent]
user = "agent"
[environment.healthcheck]
command = "curl -sf http://localhost:8000/"
retries = 10
start_period_sec = 2.5
`, map[string]string{"Dockerfile": "FROM ubuntu:24.04\nWORKDIR /srv\nENTRYPOINT [\"/srv/start.sh\"]\nCMD [\"ignored\"]\n"})
	task(t, dir, "cmd-only", "", map[string]string{"Dockerfile": "FROM ubuntu:24.04\nCMD [\"python3\", \"-m\", \"http.server\"]\n"})
	task(t, dir, "compose-command", "[environment]\nworkdir = \"/app\"\n", map[string]string{
		"Dockerfile":          "FROM ubuntu:24.04\nHEALTHCHECK --interval=1s CMD test -f /ready\n",
		"docker-compose.yaml": "services:\n  main:\n    command: python3 -m http.server 'a b'\n    environment:\n      MODE: test\n    working_dir: /srv\n",
	})
	task(t, dir, "sidecar", "", map[string]string{
		"Dockerfile":          "FROM ubuntu:24.04\n",
		"docker-compose.yaml": "services:\n  db:\n    image: postgres\n",
	})
	res := importDir(t, dir, "")

	env := envOf(t, res, "entrypoint")
	want := &spec.Service{Command: []string{"/srv/start.sh", "sh", "-c", "sleep infinity"}, User: "root"}
	if env.Service == nil || !slices.Equal(env.Service.Command, want.Command) || env.Service.User != want.User || env.Service.Workdir != "" {
		t.Errorf("service %+v, want %+v", env.Service, want)
	}
	wantHC := spec.Healthcheck{
		Command:  []string{"bash", "-c", "curl -sf http://localhost:8000/"},
		Interval: spec.Duration(5 * time.Second), Timeout: spec.Duration(30 * time.Second),
		StartPeriod: spec.Duration(2500 * time.Millisecond), StartInterval: spec.Duration(5 * time.Second),
		Retries: 10, User: "root",
	}
	if env.Healthcheck == nil || !slices.Equal(env.Healthcheck.Command, wantHC.Command) || env.Healthcheck.Interval != wantHC.Interval ||
		env.Healthcheck.Timeout != wantHC.Timeout || env.Healthcheck.StartPeriod != wantHC.StartPeriod ||
		env.Healthcheck.StartInterval != wantHC.StartInterval || env.Healthcheck.Retries != 10 || env.Healthcheck.User != "root" {
		t.Errorf("healthcheck %+v, want %+v", env.Healthcheck, wantHC)
	}

	if env := envOf(t, res, "cmd-only"); env.Service != nil {
		t.Errorf("cmd-only: service %+v; Harbor replaces CMD with sleep infinity", env.Service)
	}

	env = envOf(t, res, "compose-command")
	if env.Service == nil || !slices.Equal(env.Service.Command, []string{"python3", "-m", "http.server", "a b"}) || env.Service.Workdir != "/srv" {
		t.Errorf("compose-command: service %+v, want compose's command in compose's working_dir", env.Service)
	}
	if env.Sandbox.Workdir != "/app" || env.Env["MODE"] != "test" {
		t.Errorf("compose-command: workdir %q env %v", env.Sandbox.Workdir, env.Env)
	}
	if env.Healthcheck == nil || !slices.Equal(env.Healthcheck.Command, []string{"/bin/sh", "-c", "test -f /ready"}) || env.Healthcheck.Interval != spec.Duration(time.Second) {
		t.Errorf("compose-command: healthcheck %+v, want the Dockerfile's, which compose up --wait waits on", env.Healthcheck)
	}

	if r := refusal(res, "sidecar"); !strings.Contains(r, "db beside main") {
		t.Errorf("sidecar: refusal %q", r)
	}
}

// TestPhaseNetwork: [environment]'s network is the baseline, [agent] and
// [verifier] override it for their phase; allowed_hosts map to the egress
// allowlist where it can express them and are refused where not (loopback
// entries are the sandbox's own, not this machine's: dropped);
// ?network=deny tightens every phase.
func TestPhaseNetwork(t *testing.T) {
	dir := t.TempDir()
	df := map[string]string{"Dockerfile": "FROM ubuntu:24.04\n"}
	task(t, dir, "verifier-allowlist", `[environment]
network_mode = "allowlist"
allowed_hosts = ["PyPI.org.", "*.example.com", "10.0.0.1", "2001:db8::1/128", "localhost", "127.0.0.1", "::1"]
[agent]
network_mode = "no-network"
`, df)
	task(t, dir, "agent-public", "[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"public\"\n", df)
	task(t, dir, "legacy", "[environment]\nallow_internet = false\n", df)
	task(t, dir, "range", "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"10.0.0.0/24\"]\n", df)
	task(t, dir, "metadata", "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"169.254.169.254\"]\n", df)
	task(t, dir, "url", "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"https://example.com/x\"]\n", df)
	task(t, dir, "hosts-without-allowlist", "[agent]\nallowed_hosts = [\"example.com\"]\n", df)
	res := importDir(t, dir, "")

	env := envOf(t, res, "verifier-allowlist")
	wantHosts := []string{"pypi.org:443", "pypi.org:80", "*.example.com:443", "*.example.com:80", "10.0.0.1:443", "10.0.0.1:80", "[2001:db8::1]:443", "[2001:db8::1]:80"}
	if env.Sandbox.Network != "deny" || env.Checker.Network != "allowlist" || !slices.Equal(env.Checker.AllowHosts, wantHosts) {
		t.Errorf("agent network %q; checker %q %q, want deny and allowlist %q", env.Sandbox.Network, env.Checker.Network, env.Checker.AllowHosts, wantHosts)
	}
	if env.SetupNetwork != "allow" {
		t.Errorf("setup network %q: docker build has the network whatever the task's", env.SetupNetwork)
	}
	if !slices.ContainsFunc(res.Notes["verifier-allowlist"], func(n string) bool { return strings.Contains(n, "ports 80 and 443") }) {
		t.Errorf("notes %q: want the ports note", res.Notes["verifier-allowlist"])
	}
	env = envOf(t, res, "agent-public")
	if env.Sandbox.Network != "allow" || env.Checker.Network != "deny" {
		t.Errorf("agent-public: agent %q checker %q, want allow and deny", env.Sandbox.Network, env.Checker.Network)
	}
	env = envOf(t, res, "legacy")
	if env.Sandbox.Network != "deny" || env.Checker.Network != "" {
		t.Errorf("legacy: agent %q checker %q, want deny and the agent's", env.Sandbox.Network, env.Checker.Network)
	}
	if r := refusal(res, "range"); !strings.Contains(r, "address range") {
		t.Errorf("range: refusal %q", r)
	}
	if r := refusal(res, "metadata"); !strings.Contains(r, "link-local") {
		t.Errorf("metadata: refusal %q", r)
	}
	for _, id := range []string{"url", "hosts-without-allowlist"} {
		if r := refusal(res, id); !strings.HasPrefix(r, "invalid task") {
			t.Errorf("%s: refusal %q, want an invalid task", id, r)
		}
	}

	res = importDir(t, dir, "?tasks=verifier-allowlist,agent-public&network=deny")
	for _, id := range []string{"verifier-allowlist", "agent-public"} {
		env := envOf(t, res, id)
		if env.Sandbox.Network != "deny" || env.Checker.Network != "" || env.SetupNetwork == "allow" {
			t.Errorf("%s with network=deny: agent %q checker %q setup %q", id, env.Sandbox.Network, env.Checker.Network, env.SetupNetwork)
		}
	}
}

// TestResources: gpus and tpu are refused with the reason; cpus, memory_mb
// and storage_mb (or the deprecated memory and storage) become the
// sandbox's limits.
func TestResources(t *testing.T) {
	dir := t.TempDir()
	df := map[string]string{"Dockerfile": "FROM ubuntu:24.04\n"}
	task(t, dir, "gpu", "[environment]\ngpus = 1\n", df)
	task(t, dir, "tpu", "[environment.tpu]\ntype = \"v6e\"\ntopology = \"2x2\"\n", df)
	task(t, dir, "mcp", "[[environment.mcp_servers]]\nname = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n", df)
	task(t, dir, "limits", "[environment]\ncpus = 2\nmemory_mb = 1024\nstorage_mb = 4096\ngpus = 0\n", df)
	task(t, dir, "legacy-sizes", "[environment]\nmemory = \"2G\"\nstorage = \"512M\"\n", df)
	res := importDir(t, dir, "")
	for id, want := range map[string]string{"gpu": "no sandbox rung here offers a GPU", "tpu": "TPU", "mcp": "MCP servers"} {
		if r := refusal(res, id); !strings.Contains(r, want) {
			t.Errorf("%s: refusal %q, want %q", id, r, want)
		}
	}
	env := envOf(t, res, "limits")
	if env.Sandbox.CgroupCPUs != 2 || env.Sandbox.MemoryMB != 1024 || env.Sandbox.DiskMB != 4096 {
		t.Errorf("sandbox %+v", env.Sandbox)
	}
	if env := envOf(t, res, "legacy-sizes"); env.Sandbox.MemoryMB != 2048 || env.Sandbox.DiskMB != 512 {
		t.Errorf("legacy sizes: sandbox %+v", env.Sandbox)
	}
}

// TestNotesBesideRecords: notes travel in the result, never in the
// record, so importing does not change a record's stored spec.
func TestNotesBesideRecords(t *testing.T) {
	dir := t.TempDir()
	task(t, dir, "late-copy", "", map[string]string{"Dockerfile": "FROM ubuntu:24.04\nRUN true\nCOPY f /f\n", "f": "x"})
	res := importDir(t, dir, "")
	notes := res.Notes["late-copy"]
	if len(notes) < 2 {
		t.Fatalf("notes %q: want the late COPY and the base image's config", notes)
	}
	b, _ := json.Marshal(res.Records[0])
	for _, n := range notes {
		if strings.Contains(string(b), n) {
			t.Errorf("record carries note %q", n)
		}
	}
}
