// Command peers runs one trivial task N times through Evals.si and through
// the harnesses users would pick instead, in the same run, and prints
// trials/s, per-trial latency and the ratios:
//
//   - the task: greeting.txt ("hello") present in the task, one agent
//     command (`cat greeting.txt`), then one check (`grep -q hello
//     greeting.txt`, scored by its exit code), no network;
//   - Evals.si: embedded, exactly as bench/throughput runs its trials: a
//     scripted agent, bwrap sandboxes restored from the setup snapshot, a
//     SQLite store, every event recorded;
//   - Inspect AI (inspect-ai==0.3.285 from PyPI, in a venv of its own
//     under -cache, reused): its Docker sandbox, a compose project per
//     sample on a local image (the Debian image scripts/build-local-image.sh
//     builds, loaded into Docker once), mockllm/model with a solver that
//     runs the command through sandbox().exec and a scorer that runs the
//     check. Per-sample times come from its JSON log;
//   - Harbor (harbor==0.25.0): it requires Python >= 3.12, read from its
//     wheel's metadata; on a machine with an older Python it is an honest
//     "not measured" row.
//
// Inspect's Docker sandbox needs `docker compose` v2, which Debian's
// docker.io lacks: scripts/build-compose.sh builds it once from the Go
// module proxy, and the peer alone sees it (DOCKER_CONFIG=<temp dir> with
// cli-plugins/docker-compose). Containers the peers start carry a label
// and are removed at the end, on Ctrl-C too.
//
// Build it with CGO_ENABLED=0 like the engine: the bwrap rung re-executes
// this binary as its helper.
//
//	CGO_ENABLED=0 go run ./bench/peers [-n 20] [-concurrency 4] [-peers inspect,harbor] [-keep] [-cache DIR]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"evals.si/bench/internal/machine"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/client"

	"evals.si/sandbox/reexec"
)

type options struct {
	n, concurrency int
	peers          []string
	keep           bool
	cache          string
	python         string
	compose        string
	image          string
	imageLayout    string
}

// task is the trivial task every harness runs.
type task struct {
	file, content  string
	command, check string
}

var theTask = task{file: "greeting.txt", content: "hello\n", command: "cat greeting.txt", check: "grep -q hello greeting.txt"}

func main() {
	reexec.Init()
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/peers:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/peers:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	imgCache := os.Getenv("EVALSI_IMAGE_CACHE")
	if imgCache == "" {
		imgCache = "/var/cache/evalsi/images"
		if os.Geteuid() != 0 {
			imgCache = filepath.Join(cache, "evalsi", "images")
		}
	}
	fs := flag.NewFlagSet("bench/peers", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 20, "trials per harness")
	fs.IntVar(&o.concurrency, "concurrency", 2*runtime.NumCPU(), "concurrent trials in every harness (default: the engine's, 2 × CPUs)")
	peers := fs.String("peers", "inspect,harbor", "the peers to run besides Evals.si, comma-separated: inspect, harbor (empty: none)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (specs, store, the peers' logs) and print where")
	fs.StringVar(&o.cache, "cache", filepath.Join(cache, "evalsi", "bench-peers"), "where the peers' environments are installed once and reused")
	fs.StringVar(&o.python, "python", "python3", "the Python the peers' environments are made from")
	fs.StringVar(&o.compose, "compose", "", "a docker compose v2 binary for the peers (default: scripts/build-compose.sh's, built if missing)")
	fs.StringVar(&o.image, "image", "", "a local Docker image for the peers' sandboxes (default: -image-layout loaded into Docker)")
	fs.StringVar(&o.imageLayout, "image-layout", filepath.Join(imgCache, "debian-bookworm"), "OCI layout of the peers' image (scripts/build-local-image.sh builds it)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.n < 1 || o.concurrency < 1 {
		return o, errors.New("-n and -concurrency must be positive")
	}
	for _, p := range strings.Split(*peers, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case "":
		case "inspect", "harbor":
			if !slices.Contains(o.peers, p) {
				o.peers = append(o.peers, p)
			}
		default:
			return o, fmt.Errorf("-peers: unknown peer %q; the peers are inspect and harbor", p)
		}
	}
	return o, nil
}

// peerEnv is what the Docker-based peers share: the run's directory,
// the compose plugin's DOCKER_CONFIG, the local image, the cleanup label.
type peerEnv struct {
	dir, dockerConfig, image, label string
	dockerVersion                   string
	belowEngineGate                 bool
}

func run(ctx context.Context, o options, w io.Writer) error {
	dir, err := os.MkdirTemp("", "evalsi-peers-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(w, "state kept in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	h := header{when: time.Now(), cpus: runtime.NumCPU(), load: machine.LoadAvg(), osArch: runtime.GOOS + "/" + runtime.GOARCH,
		n: o.n, conc: o.concurrency, command: theTask.command, check: theTask.check,
		python: "unknown", docker: "not used", compose: "not used", peerVersion: map[string]string{}}
	if v, err := pythonVersion(ctx, o.python); err == nil {
		h.python = v
	}

	results := []*result{}
	self, err := evalsiTrials(ctx, dir, o, theTask)
	if err != nil {
		return fmt.Errorf("Evals.si trials: %w", err)
	}
	results = append(results, self)

	if slices.Contains(o.peers, "inspect") {
		h.peerVersion["inspect-ai"] = inspectVersion
		r, err := withDocker(ctx, o, dir, &h, func(env peerEnv) (*result, error) { return inspectPeer(ctx, o, env, theTask) })
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r = &result{harness: "Inspect AI", version: inspectVersion, sandbox: "docker compose project per sample", skipped: "not measured: " + firstLine(err.Error())}
			fmt.Fprintln(os.Stderr, "bench/peers: Inspect AI:", err)
		}
		results = append(results, r)
	}
	if slices.Contains(o.peers, "harbor") {
		h.peerVersion["harbor"] = harborVersion
		results = append(results, harborPeer(ctx, o))
	}
	printReport(w, h, results, machine.LoadAvg())
	return ctx.Err()
}

// withDocker prepares what a Docker-based peer needs, runs it, and
// removes whatever containers it left behind, even when interrupted.
func withDocker(ctx context.Context, o options, dir string, h *header, peer func(peerEnv) (*result, error)) (*result, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	sv, err := cli.ServerVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("reaching the Docker daemon: %w", err)
	}
	h.docker = sv.Version
	env := peerEnv{dir: dir, dockerVersion: sv.Version, label: randomLabel()}
	if env.belowEngineGate, err = olderThan(sv.Version, inspectEngineGate); err != nil {
		return nil, fmt.Errorf("docker engine version %q: %w", sv.Version, err)
	}
	plugin, err := findCompose(ctx, o.compose)
	if err != nil {
		return nil, err
	}
	if env.dockerConfig, err = composeConfig(ctx, dir, plugin); err != nil {
		return nil, err
	}
	if v, err := composeVersion(ctx, env.dockerConfig); err == nil {
		h.compose = v
	}
	env.image = o.image
	if env.image == "" {
		if env.image, err = localImage(ctx, cli, o.imageLayout); err != nil {
			return nil, err
		}
	}
	defer func() {
		// Not ctx: it may be cancelled, and the cleanup must still run.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		n, err := removeLabelled(cctx, cli, env.label)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/peers: cleanup:", err)
		} else if n > 0 {
			fmt.Fprintf(os.Stderr, "bench/peers: removed %d containers the peer left behind\n", n)
		}
	}()
	return peer(env)
}

func composeVersion(ctx context.Context, dockerConfig string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", "compose", "version", "--short")
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerConfig)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

func randomLabel() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
