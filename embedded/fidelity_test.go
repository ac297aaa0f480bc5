package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/aptrepo"
	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
	"evals.si/store"
)

// Real benchmark tasks set up as Docker would build and run them: a Harbor
// task and a Terminal-Bench task whose own Dockerfiles apt-get install from
// a package repository on a test host and useradd, one run by
// [agent].user, one by the Dockerfile's USER, and a Harbor task whose
// ENTRYPOINT service is waited on by its [environment.healthcheck] on
// localhost. Each passes with the oracle agent and scores 0 with an agent
// that does nothing, on bwrap and docker, through the engine.

// fidelityTask is one task folder: path → content (mode 0755 for *.sh).
type fidelityTask map[string]string

func writeTasks(t *testing.T, tasks map[string]fidelityTask) string {
	t.Helper()
	root := t.TempDir()
	for name, files := range tasks {
		for p, content := range files {
			full := filepath.Join(root, name, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			mode := os.FileMode(0o644)
			if strings.HasSuffix(p, ".sh") {
				mode = 0o755
			}
			if err := os.WriteFile(full, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// harborTasks are the Harbor tasks; repo is the apt repository.
func harborTasks(repo *aptrepo.Repo) map[string]fidelityTask {
	return map[string]fidelityTask{
		// [agent].user: the agent (and the oracle's solve.sh) run as
		// agent, the verifier as root.
		"apt-user": {
			"task.toml": `version = "1.0"
[agent]
timeout_sec = 120.0
user = "agent"
[verifier]
timeout_sec = 120.0
[environment]
memory_mb = 2048
`,
			"instruction.md": "Run `hello` and save what it prints to /srv/work/greeting.txt, and your user name to /srv/work/whoami.txt.\n",
			"environment/Dockerfile": `FROM debian:bookworm
RUN ` + repo.UseOnly() + ` && apt-get update && apt-get install -y --no-install-recommends hello
RUN useradd -m -s /bin/bash agent && mkdir -p /srv/work && chown agent:agent /srv/work
WORKDIR /srv/work
`,
			"solution/solve.sh": "#!/bin/bash\nset -e\nhello > /srv/work/greeting.txt\nid -un > /srv/work/whoami.txt\n",
			"tests/test.sh": `#!/bin/bash
f=/srv/work/greeting.txt
if [ "$(id -un)" = root ] && [ "$(cat "$f" 2>/dev/null)" = "Hello, world!" ] && [ "$(stat -c %U "$f")" = agent ] && [ "$(cat /srv/work/whoami.txt)" = agent ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "greeting: $(cat "$f" 2>&1) owner: $(stat -c %U "$f" 2>&1) whoami: $(cat /srv/work/whoami.txt 2>&1) verifier: $(id -un)"
  echo 0 > /logs/verifier/reward.txt
fi
`,
		},
		// An ENTRYPOINT service, started before the agent as the
		// container's main process is, and a healthcheck on localhost that
		// has to wait for it.
		"service-health": {
			"task.toml": `version = "1.0"
[agent]
timeout_sec = 120.0
[verifier]
timeout_sec = 120.0
[environment]
memory_mb = 2048
[environment.healthcheck]
command = "python3 -c \"import urllib.request; urllib.request.urlopen('http://localhost:8080/health', timeout=2)\""
interval_sec = 1.0
timeout_sec = 5.0
start_period_sec = 20.0
start_interval_sec = 0.5
retries = 3
`,
			"instruction.md": "A service on localhost:8080 serves a token at /token. Save it to /app/token.txt.\n",
			"environment/Dockerfile": `FROM debian:bookworm
RUN ` + repo.UseOnly() + ` && apt-get update && apt-get install -y --no-install-recommends figlet
COPY serve.py /opt/serve.py
COPY entrypoint.sh /entrypoint.sh
WORKDIR /app
ENTRYPOINT ["/entrypoint.sh"]
`,
			"environment/entrypoint.sh": "#!/bin/sh\npython3 /opt/serve.py >/tmp/serve.log 2>&1 &\nexec \"$@\"\n",
			"environment/serve.py": `import http.server, os, subprocess, time
# Slow to start, so the healthcheck has to wait for it.
time.sleep(1.5)
token = subprocess.run(["figlet", "-f", "term", os.urandom(6).hex()], capture_output=True, text=True, check=True).stdout.strip()
with open("/tmp/service-token", "w") as f:
    f.write(token)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": "ok", "/token": token}.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())
http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()
`,
			"solution/solve.sh": "#!/bin/bash\nset -e\npython3 -c \"import urllib.request; print(urllib.request.urlopen('http://localhost:8080/token').read().decode())\" > /app/token.txt\n",
			"tests/test.sh": `#!/bin/bash
want=$(python3 -c "import urllib.request; print(urllib.request.urlopen('http://localhost:8080/token').read().decode())")
if [ -n "$want" ] && [ "$(cat /app/token.txt 2>/dev/null)" = "$want" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "token: $(cat /app/token.txt 2>&1) want: $want"
  echo 0 > /logs/verifier/reward.txt
fi
`,
		},
	}
}

// terminalBenchTasks: the Dockerfile's USER runs the later RUN steps and the
// agent; the tests run as root, as Terminal-Bench's harness runs them (a
// tmux session of its own, as_configured_user=False).
func terminalBenchTasks(repo *aptrepo.Repo) map[string]fidelityTask {
	return map[string]fidelityTask{
		"apt-user": {
			"task.yaml": `instruction: |
  Run hello and save what it prints to /app/greeting.txt.
parser_name: pytest
max_agent_timeout_sec: 120
max_test_timeout_sec: 60
`,
			"Dockerfile": `FROM debian:bookworm
RUN ` + repo.UseOnly() + ` && apt-get update && apt-get install -y --no-install-recommends hello
RUN useradd -m -s /bin/bash agent && mkdir -p /app && chown agent:agent /app
USER agent
WORKDIR /app
RUN id -un > /app/built-as.txt
`,
			"docker-compose.yaml": `services:
  client:
    build:
      context: .
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: ["sh", "-c", "sleep infinity"]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
`,
			"solution.sh":  "#!/bin/bash\nset -e\nhello > /app/greeting.txt\n",
			"run-tests.sh": "#!/bin/bash\ncd /app\npython3 -m pytest -p no:cacheprovider -rA \"$TEST_DIR/test_outputs.py\"\n",
			"tests/test_outputs.py": `import os, pwd

def test_greeting_by_agent():
    p = "/app/greeting.txt"
    assert open(p).read().strip() == "Hello, world!"
    assert pwd.getpwuid(os.stat(p).st_uid).pw_name == "agent"

def test_built_as_agent_tested_as_root():
    assert open("/app/built-as.txt").read().strip() == "agent"
    assert os.getuid() == 0
`,
		},
	}
}

type fidelityRung struct {
	name string
	need func(t *testing.T)
}

func TestBenchmarkTasksAsDockerRunsThem(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the test package repository is served from a network namespace, which needs root")
	}
	img := benchimage.Ref(t, "..")
	repo := aptrepo.Serve(t, "..")
	harbor := writeTasks(t, harborTasks(repo))
	tb := writeTasks(t, terminalBenchTasks(repo))
	datasets := []struct {
		name, uri string
		ids       []string
	}{
		{"harbor", "harbor://" + harbor, []string{"apt-user", "service-health"}},
		{"terminal-bench", "terminal-bench://" + tb, []string{"apt-user"}},
	}
	for _, r := range []fidelityRung{
		{sandbox.RungBwrap, requireAgentSandbox},
		{sandbox.RungDocker, requireDocker},
	} {
		t.Run(r.name, func(t *testing.T) {
			r.need(t)
			for _, ds := range datasets {
				t.Run(ds.name, func(t *testing.T) {
					for _, agentKind := range []string{"oracle", "nothing"} {
						t.Run(agentKind, func(t *testing.T) {
							scores := runFidelity(t, r.name, ds.uri, img, agentKind)
							want := 1.0
							if agentKind == "nothing" {
								want = 0
							}
							// Every task ran and was scored: a task the
							// importer dropped, or a trial with no score,
							// must not pass as a 0.
							for _, id := range ds.ids {
								got, ok := scores[id]
								if !ok {
									t.Errorf("%s %s with the %s agent: no task-success score", ds.name, id, agentKind)
								} else if got != want {
									t.Errorf("%s %s with the %s agent: task-success %v, want %v", ds.name, id, agentKind, got, want)
								}
							}
						})
					}
				})
			}
		})
	}
}

// runFidelity runs every task of uri with the oracle, or with an agent
// that answers at once without a tool call, and returns task-success by
// record. A trial that errors fails the test with its error.
func runFidelity(t *testing.T, rung, uri, img, agentKind string) map[string]float64 {
	t.Helper()
	var target map[string]any
	if agentKind == "oracle" {
		target = map[string]any{"agent": map[string]any{"oracle": map[string]any{}}}
	} else {
		target = map[string]any{"connector": "scripted", "model": "scripted-agent",
			"script": map[string]any{"default": []map[string]any{{"content": "I did nothing."}}}}
	}
	s := map[string]any{
		"name":        "fidelity-" + rung,
		"concurrency": 2,
		"retries":     0,
		"dataset":     map[string]any{"uri": uri},
		"target":      target,
		"evaluators":  []string{"task-success"},
		// A model target runs as an agent in the task's sandbox only
		// through a harness (without one it is a plain model call).
		"harness": map[string]any{"builtin": map[string]any{"max_steps": 2}},
		"environment": map[string]any{
			"image_mirrors": map[string]string{"debian:bookworm": img},
			// The spec's network is the ceiling of every task's: these
			// tasks build and run with the network, as Docker's would.
			"setup_network": "allow",
			"sandbox":       map[string]any{"ladder": []string{rung}, "network": "allow"},
		},
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	p := filepath.Join(t.TempDir(), "fidelity.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f := loadSpec(t, p)
	a := openApp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sum, err := a.Run(ctx, f, RunOptions{})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("the run hung: still running after 10 minutes")
	}
	if err != nil {
		t.Fatalf("running %s: %v", uri, err)
	}
	views := trialViews(t, a, sum)
	if len(views) == 0 {
		t.Fatalf("%s: no trial ran", uri)
	}
	out := map[string]float64{}
	for id, v := range views {
		if v.trial.Status != store.TrialFinished {
			t.Errorf("%s: trial %s %s (%s): %s", uri, id, v.trial.Status, v.trial.ErrorKind, v.trial.Error)
			continue
		}
		if s, ok := v.scores["task-success"]; ok {
			out[id] = s
		}
		if v.report.Rung != rung {
			t.Errorf("%s %s: ran on %q, want the %s rung", uri, id, v.report.Rung, rung)
		}
		if checkerOutput(v) == "(no checker event)" {
			t.Errorf("%s %s: no checker ran", uri, id)
		}
		if want := agentKind == "oracle"; want && out[id] != 1 {
			t.Logf("%s %s: checker output:\n%s", uri, id, checkerOutput(v))
		}
	}
	return out
}

func checkerOutput(v *trialView) string {
	for _, e := range v.events {
		if e.Checker != nil {
			return fmt.Sprintf("exit %d: %s %s", e.Checker.ExitCode, e.Checker.Details, e.Checker.Output)
		}
	}
	return "(no checker event)"
}
