package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	inspectVersion = "0.3.285"
	// inspectEngineGate is the Docker Engine version Inspect's
	// prerequisite check (util/_sandbox/docker/prereqs.py) asks for.
	inspectEngineGate = "24.0.6"
	// peerLabel marks every container the peers start, so bench/peers
	// removes what a peer left behind (Ctrl-C, a crash) and nothing else.
	peerLabel = "si.evals.bench-peers"
)

//go:embed inspect_task.py
var inspectTask []byte

// venv makes (once) a virtual environment at dir from the machine's
// python with pkg==version in it, with uv when there is one (faster),
// else venv and pip. Never the system Python's site-packages.
func venv(ctx context.Context, python, dir, pkg, version string) error {
	if v, err := installedVersion(ctx, dir, pkg); err == nil && v == version {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "UV_PYTHON_DOWNLOADS=never")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out, 2000))
		}
		return nil
	}
	fmt.Fprintf(os.Stderr, "bench/peers: installing %s==%s into %s\n", pkg, version, dir)
	if uv, err := exec.LookPath("uv"); err == nil {
		if err := run(uv, "venv", "-q", "--clear", "--python", python, dir); err != nil {
			return err
		}
		if err := run(uv, "pip", "install", "-q", "--python", filepath.Join(dir, "bin", "python"), pkg+"=="+version); err != nil {
			return err
		}
	} else {
		if err := run(python, "-m", "venv", "--clear", dir); err != nil {
			return err
		}
		if err := run(filepath.Join(dir, "bin", "python"), "-m", "pip", "install", "-q", pkg+"=="+version); err != nil {
			return err
		}
	}
	v, err := installedVersion(ctx, dir, pkg)
	if err != nil {
		return err
	}
	if v != version {
		return fmt.Errorf("%s in %s is %s after installing %s", pkg, dir, v, version)
	}
	return nil
}

func installedVersion(ctx context.Context, dir, pkg string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "bin", "python"), "-c",
		"import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", pkg).Output()
	if err != nil {
		return "", fmt.Errorf("reading %s's version in %s: %w", pkg, dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// composeConfig makes a DOCKER_CONFIG directory whose cli-plugins holds
// the compose plugin, so `docker compose` works for the peer's processes
// alone; nothing is installed system-wide.
func composeConfig(ctx context.Context, dir, plugin string) (string, error) {
	cfg := filepath.Join(dir, "docker-config")
	if err := os.MkdirAll(filepath.Join(cfg, "cli-plugins"), 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink(plugin, filepath.Join(cfg, "cli-plugins", "docker-compose")); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "docker", "compose", "version", "--short")
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+cfg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker compose version with the plugin %s: %w: %s", plugin, err, strings.TrimSpace(string(out)))
	}
	return cfg, nil
}

// findCompose returns the compose plugin: -compose, the one
// scripts/build-compose.sh cached, or built now with that script.
func findCompose(ctx context.Context, flagPath string) (string, error) {
	if flagPath != "" {
		return flagPath, nil
	}
	script, err := repoFile("scripts/build-compose.sh")
	if err != nil {
		return "", fmt.Errorf("no -compose given and %w", err)
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building docker compose with %s: %w (or give a compose v2 binary with -compose)", script, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// repoFile finds rel in the module root above the working directory.
func repoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, rel)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%s is not in the module root %s", rel, dir)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found: run bench/peers from the Evals.si repository", rel)
		}
		dir = parent
	}
}

// localImage loads the OCI layout at dir (the Debian image
// scripts/build-local-image.sh builds) into the Docker daemon once, as
// evalsi-bench-peers:<digest>, and returns that tag: the peers' compose
// files name a local image, as no registry is reachable.
func localImage(ctx context.Context, cli *client.Client, dir string) (string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", fmt.Errorf("opening the image layout %s (build it with scripts/build-local-image.sh, or name a local image with -image): %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return "", fmt.Errorf("reading the image layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", fmt.Errorf("reading the image layout %s: %w", dir, err)
	}
	if len(m.Manifests) == 0 {
		return "", fmt.Errorf("the image layout %s holds no image", dir)
	}
	d := m.Manifests[0].Digest
	ref := "evalsi-bench-peers:" + d.Hex[:16]
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	img, err := idx.Image(d)
	if err != nil {
		return "", fmt.Errorf("reading image %s in %s: %w", d, dir, err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "bench/peers: loading %s into Docker as %s (once)\n", dir, ref)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.Write(tag, img, pw)) }()
	resp, err := cli.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		pr.CloseWithError(err)
		return "", fmt.Errorf("docker load of %s: %w", dir, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	pr.Close()
	if err != nil {
		return "", fmt.Errorf("docker load of %s: %w", dir, err)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("docker load of %s did not make %s: %w", dir, ref, err)
	}
	return ref, nil
}

// composeFile is the peer's sandbox: the local image, kept running for
// the sample's commands, no network (as the Evals.si trials), labelled for
// cleanup.
func composeFile(img, runLabel string) string {
	return `services:
  default:
    image: ` + img + `
    x-local: true
    pull_policy: never
    entrypoint: []
    command: ["sleep", "infinity"]
    init: true
    working_dir: /workspace
    network_mode: none
    labels:
      ` + peerLabel + `: ` + runLabel + `
`
}

// removeLabelled force-removes the containers carrying the run's label,
// returning how many there were.
func removeLabelled(ctx context.Context, cli *client.Client, runLabel string) (int, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", peerLabel+"="+runLabel))})
	if err != nil {
		return 0, fmt.Errorf("listing the peer's containers: %w", err)
	}
	var errs []error
	for _, c := range list {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("removing container %s: %w", c.ID[:12], err))
		}
	}
	return len(list), errors.Join(errs...)
}

// olderThan says whether Docker's version a is older than b (numeric
// release segments; "20.10.24+dfsg1" reads as 20.10.24).
func olderThan(a, b string) (bool, error) {
	a, _, _ = strings.Cut(a, "+")
	a, _, _ = strings.Cut(a, "-")
	x, err := parseVersion(a)
	if err != nil {
		return false, err
	}
	y, err := parseVersion(b)
	if err != nil {
		return false, err
	}
	return compareVersions(x, y) < 0, nil
}

// inspectPeer runs the task n times through Inspect AI's Docker sandbox
// and reads the per-sample times from its JSON log.
func inspectPeer(ctx context.Context, o options, env peerEnv, tk task) (*result, error) {
	res := &result{harness: "Inspect AI", version: inspectVersion, sandbox: "docker compose project per sample"}
	venvDir := filepath.Join(o.cache, "inspect-ai-"+inspectVersion)
	if err := venv(ctx, o.python, venvDir, "inspect-ai", inspectVersion); err != nil {
		return nil, fmt.Errorf("installing inspect-ai: %w", err)
	}
	dir := filepath.Join(env.dir, "inspect")
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	// Relative: Inspect globs the task path under its working directory.
	taskFile := "evalsi_peers_task.py"
	if err := os.WriteFile(filepath.Join(dir, taskFile), inspectTask, 0o644); err != nil {
		return nil, err
	}
	composePath := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(composePath, []byte(composeFile(env.image, env.label)), 0o644); err != nil {
		return nil, err
	}
	c := strconv.Itoa(o.concurrency)
	cmd := exec.Command(filepath.Join(venvDir, "bin", "inspect"), "eval", taskFile,
		"--model", "mockllm/model",
		"--max-samples", c, "--max-sandboxes", c, "--max-subprocesses", c,
		"--log-format", "json", "--log-dir", filepath.Join(dir, "logs"),
		"--display", "none")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"DOCKER_CONFIG="+env.dockerConfig,
		"EVALSI_PEERS_N="+strconv.Itoa(o.n),
		"EVALSI_PEERS_COMPOSE="+composePath,
		"EVALSI_PEERS_COMMAND="+tk.command,
		"EVALSI_PEERS_CHECK="+tk.check,
	)
	if env.belowEngineGate {
		cmd.Env = append(cmd.Env, "EVALSI_PEERS_SKIP_ENGINE_GATE=1")
		res.notes = append(res.notes, fmt.Sprintf("its Docker Engine check (>= %s) was skipped, this daemon being %s; the compose check and all the sandbox does are Inspect's own", inspectEngineGate, env.dockerVersion))
	}
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	// Its own process group, so a Ctrl-C reaches Inspect only through
	// us: we interrupt it and give it time to bring its projects down.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting inspect eval: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		return nil, ctx.Err()
	}
	res.wall = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("inspect eval: %w\n%s", err, tail(output.Bytes(), 4000))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.json"))
	if len(logs) != 1 {
		return nil, fmt.Errorf("inspect eval wrote %d JSON logs in %s, want 1\n%s", len(logs), filepath.Join(dir, "logs"), tail(output.Bytes(), 4000))
	}
	b, err := os.ReadFile(logs[0])
	if err != nil {
		return nil, err
	}
	lg, err := parseInspectLog(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", logs[0], err)
	}
	if lg.version != inspectVersion {
		return nil, fmt.Errorf("%s: written by inspect_ai %s, want %s", logs[0], lg.version, inspectVersion)
	}
	if len(lg.latencies) != o.n {
		return nil, fmt.Errorf("%s: %d samples, want %d", logs[0], len(lg.latencies), o.n)
	}
	res.trials, res.passed, res.latencies, res.span = len(lg.latencies), lg.passed, lg.latencies, lg.span
	res.notes = append(res.notes,
		"wall is the `inspect eval` process, start to exit (Python start-up, prerequisite checks, the trials, cleanup); latency is each sample's first event (sandbox start) to its completed_at, from its JSON log",
		fmt.Sprintf("--max-samples, --max-sandboxes and --max-subprocesses %d; the solver runs the command with sandbox().exec, the scorer the check; mockllm/model, never called", o.concurrency))
	return res, nil
}

// inspectLog is what bench/peers reads from an Inspect JSON log.
type inspectLog struct {
	version   string
	passed    int
	latencies []time.Duration
	span      time.Duration
}

func parseInspectLog(b []byte) (*inspectLog, error) {
	var raw struct {
		Status string `json:"status"`
		Eval   struct {
			Packages map[string]string `json:"packages"`
		} `json:"eval"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Samples []struct {
			ID          any    `json:"id"`
			CompletedAt string `json:"completed_at"`
			StartedAt   string `json:"started_at"`
			Error       *struct {
				Message string `json:"message"`
			} `json:"error"`
			Scores map[string]struct {
				Value any `json:"value"`
			} `json:"scores"`
			Events []struct {
				Timestamp string `json:"timestamp"`
			} `json:"events"`
		} `json:"samples"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not an Inspect JSON log (run with --log-format json): %w", err)
	}
	if raw.Status != "success" {
		msg := ""
		if raw.Error != nil {
			msg = ": " + raw.Error.Message
		}
		return nil, fmt.Errorf("eval status %q, want \"success\"%s", raw.Status, msg)
	}
	lg := &inspectLog{version: raw.Eval.Packages["inspect_ai"]}
	var first, last time.Time
	for _, s := range raw.Samples {
		if s.Error != nil {
			return nil, fmt.Errorf("sample %v failed: %s", s.ID, s.Error.Message)
		}
		start, err := time.Parse(time.RFC3339Nano, s.StartedAt)
		if err != nil {
			return nil, fmt.Errorf("sample %v: started_at %q: %w", s.ID, s.StartedAt, err)
		}
		// The sample's started_at is taken after its sandbox is up; its
		// first event is the sandbox's start.
		for _, e := range s.Events {
			if t, err := time.Parse(time.RFC3339Nano, e.Timestamp); err == nil && t.Before(start) {
				start = t
			}
		}
		end, err := time.Parse(time.RFC3339Nano, s.CompletedAt)
		if err != nil {
			return nil, fmt.Errorf("sample %v: completed_at %q: %w", s.ID, s.CompletedAt, err)
		}
		lg.latencies = append(lg.latencies, end.Sub(start))
		if first.IsZero() || start.Before(first) {
			first = start
		}
		if end.After(last) {
			last = end
		}
		for _, sc := range s.Scores {
			if sc.Value == "C" {
				lg.passed++
			}
		}
	}
	lg.span = last.Sub(first)
	return lg, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
