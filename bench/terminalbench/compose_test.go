package terminalbench

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"evals.si/bench/importer"
	"evals.si/dataset"
	"evals.si/spec"
)

// writeTask writes a Terminal-Bench task folder with the files given over
// a minimal task.yaml, run-tests.sh and tests/.
func writeTask(t *testing.T, root, name string, files map[string]string) {
	t.Helper()
	all := map[string]string{
		"task.yaml":             "instruction: do it\n",
		"run-tests.sh":          "pytest $TEST_DIR/test_outputs.py -rA\n",
		"tests/test_outputs.py": "def test_a(): pass\n",
		"Dockerfile":            "FROM ubuntu:24.04\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for p, data := range all {
		full := filepath.Join(root, name, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func importAll(t *testing.T, dir string) (*importer.Result, map[string]*spec.Environment) {
	t.Helper()
	u, _ := url.Parse("terminal-bench://.")
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]*spec.Environment{}
	for _, r := range res.Records {
		env, err := dataset.Environment(nil, r)
		if err != nil {
			t.Fatalf("%s: the record's environment does not load: %v", r.ID, err)
		}
		envs[r.ID] = env
	}
	return res, envs
}

const tbCompose = `services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
`

// TestComposeAsApplied: the client service's user, entrypoint, command,
// environment and resource limits are applied as compose applies them to
// the container; the Dockerfile's USER is the agent's user when compose
// names none; the tests run as root unless run_tests_in_same_shell; an
// image HEALTHCHECK is not waited on, as the harness does not.
func TestComposeAsApplied(t *testing.T) {
	dir := t.TempDir()
	userDF := "FROM ubuntu:24.04\nRUN useradd -m app\nUSER app\nWORKDIR /home/app\n"
	writeTask(t, dir, "image-user", map[string]string{"Dockerfile": userDF, "docker-compose.yaml": tbCompose})
	writeTask(t, dir, "compose-user", map[string]string{"Dockerfile": userDF, "docker-compose.yaml": tbCompose + "    user: \"1000:1000\"\n"})
	writeTask(t, dir, "same-shell", map[string]string{"Dockerfile": userDF, "docker-compose.yaml": tbCompose, "task.yaml": "instruction: do it\nrun_tests_in_same_shell: true\n"})
	writeTask(t, dir, "entrypoint", map[string]string{"Dockerfile": "FROM ubuntu:24.04\nENTRYPOINT [\"/start.sh\"]\nHEALTHCHECK CMD true\n", "docker-compose.yaml": tbCompose})
	writeTask(t, dir, "compose-entrypoint", map[string]string{
		"Dockerfile": "FROM ubuntu:24.04\nENTRYPOINT [\"/ignored\"]\nCMD [\"ignored\"]\n",
		"docker-compose.yaml": strings.NewReplacer(`command: [ "sh", "-c", "sleep infinity" ]`, "entrypoint: [\"/e\"]\n    command: serve --name 'a b'",
			"- TEST_DIR=${T_BENCH_TEST_DIR}\n", "- TEST_DIR=${T_BENCH_TEST_DIR}\n      - SECRET\n").Replace(tbCompose) +
			"      - ./data:/data\n    ports:\n      - \"8080:80\"\n    deploy:\n      resources:\n        limits:\n          cpus: '1.5'\n          memory: 512M\n",
	})
	res, envs := importAll(t, dir)
	cases := []struct{ id, user, checkerUser string }{
		{"image-user", "app", "root"},
		{"compose-user", "1000:1000", "root"},
		{"same-shell", "app", ""},
		{"entrypoint", "", ""},
	}
	for _, c := range cases {
		env := envs[c.id]
		if env == nil {
			t.Fatalf("%s not imported: %+v", c.id, res.Refused)
		}
		if env.User != c.user || env.Checker.User != c.checkerUser {
			t.Errorf("%s: user %q checker user %q, want %q and %q", c.id, env.User, env.Checker.User, c.user, c.checkerUser)
		}
	}
	if s := envs["image-user"].Service; s != nil {
		t.Errorf("image-user: service %+v, want none (sleep infinity is the keepalive)", s)
	}
	if s := envs["entrypoint"].Service; s == nil || !slices.Equal(s.Command, []string{"/start.sh", "sh", "-c", "sleep infinity"}) {
		t.Errorf("entrypoint: service %+v, want the ENTRYPOINT wrapping compose's command", s)
	}
	if h := envs["entrypoint"].Healthcheck; h != nil {
		t.Errorf("entrypoint: healthcheck %+v; Terminal-Bench (docker compose up -d) does not wait on it", h)
	}
	env := envs["compose-entrypoint"]
	if env == nil {
		t.Fatalf("compose-entrypoint not imported: %+v", res.Refused)
	}
	if env.Service == nil || !slices.Equal(env.Service.Command, []string{"/e", "serve", "--name", "a b"}) {
		t.Errorf("compose-entrypoint: service %+v, want compose's entrypoint and command, the image's CMD reset", env.Service)
	}
	if _, ok := env.Env["SECRET"]; ok || env.Env["TEST_DIR"] != "/tests" {
		t.Errorf("compose-entrypoint: env %v", env.Env)
	}
	if env.Sandbox.CgroupCPUs != 1.5 || env.Sandbox.MemoryMB != 512 {
		t.Errorf("compose-entrypoint: sandbox %+v, want deploy's limits", env.Sandbox)
	}
	notes := strings.Join(res.Notes["compose-entrypoint"], "\n")
	for _, want := range []string{"SECRET", "ports not applied", "volumes at /data"} {
		if !strings.Contains(notes, want) {
			t.Errorf("compose-entrypoint: notes %q lack %q", notes, want)
		}
	}
	if strings.Contains(notes, "ENTRYPOINT (taken") {
		t.Errorf("compose-entrypoint: notes %q: compose's entrypoint leaves nothing to the base image", notes)
	}
}
