// Package sandboxtest holds the suites every sandbox rung runs: Conformance
// (the behaviour scoring relies on) and Escapes (a table of hostile commands
// that must be contained, with an honest summary of what a rung does not
// contain). Both use no image: the host's system directories, read-only, so
// they need sh, coreutils and python3 in /usr/bin.
package sandboxtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

// Capabilities a rung may declare it lacks (Options.Gaps keys).
const (
	// CapSnapshot: the sandbox does not implement sandbox.Snapshotter.
	CapSnapshot = "snapshot"
	// CapNetworkDeny: network: deny does not stop TCP/UDP/DNS.
	CapNetworkDeny = "network-deny"
	// CapMemoryLimit: Limits.MemoryMB does not stop a memory hog.
	CapMemoryLimit = "memory-limit"
	// CapMemoryDenial: a memory hog is stopped, but the rung cannot tell
	// (no "oom"/"memory" denial), e.g. RLIMIT_AS makes allocations fail.
	CapMemoryDenial = "memory-denial"
	// CapReadOnlyRoot: ReadOnlyRoot does not make the root read-only.
	CapReadOnlyRoot = "read-only-root"
	// CapPrivateRoot: without ReadOnlyRoot, writes outside the workdir do
	// not land in a private copy (they fail, or reach the host).
	CapPrivateRoot = "private-root"
	// CapWorkdirPath: the workdir is not at Config.Workdir inside the
	// sandbox (the host rung uses a host temp directory).
	CapWorkdirPath = "workdir-path"
	// CapExecUser: ExecRequest.User (docker exec -u) is not honoured:
	// the ExecUser subtest (which also starts a service as the user,
	// unless CapService is declared too).
	CapExecUser = "exec-user"
	// CapService: StartService is not offered (Service and
	// ServiceEndsWithSandbox subtests).
	CapService = "service"
	// CapEtcFiles: the sandbox has no /etc/hosts, /etc/hostname and
	// /etc/resolv.conf of its own as Docker writes them (EtcFiles).
	CapEtcFiles = "etc-files"
	// CapOutputStream: ExecRequest.Output is given nothing while the
	// command runs (the contract allows it: the output comes in the
	// result); the OutputStreams subtest.
	CapOutputStream = "output-stream"
	// CapFilesDuringExec: ReadFile and WriteFile wait for a running
	// command, so OutputStreams proves the output live by cancelling the
	// command from the hook instead of by a file the hook writes.
	CapFilesDuringExec = "files-during-exec"
)

// Options tune the suites for one rung.
type Options struct {
	// Gaps maps a Cap* capability the rung lacks to the reason; the
	// matching conformance subtest is skipped with that reason.
	Gaps map[string]string
	// Uncontained maps an escape row (Row* constants) to why the rung does
	// not contain it. The row still runs and its outcome is reported.
	Uncontained map[string]string
	// NotRun maps an escape row to why running it would harm the host (a
	// fork bomb on a rung without a process cap). It is reported as not
	// contained and not run.
	NotRun map[string]string
	// ProxyUnix makes the allowlist row give the rung the proxy as
	// "unix:/path" instead of "127.0.0.1:port".
	ProxyUnix bool
	// ProxyAddr, when set, is what the allowlist row gives the rung as
	// the proxy's address for the test proxy p, for rungs that name
	// proxies otherwise (a sandbox pool's id for a proxy it adopted). It
	// wins over ProxyUnix.
	ProxyAddr func(t *testing.T, p *Proxy) string
	// Config adjusts every config the suites create (state dirs, images).
	Config func(*sandbox.Config)
	// Users adjusts the config of the ExecUser subtest, which adds a user
	// to /etc/passwd and /etc/group as root inside (as a Dockerfile's
	// useradd would) before running commands as it: it must give root
	// inside a writable /etc and the image sh and coreutils, for example
	// Root (or Image) set to the local Debian image
	// (internal/testenv/benchimage). It runs before Config. Nil: the
	// suite's no-image config, whose /etc is the host's and read-only on
	// every rung so far, so the subtest fails there unless CapExecUser is
	// declared. The escape row RowUserToRoot needs no /etc of its own: it
	// runs as a numeric uid with no passwd entry.
	Users func(t *testing.T, c *sandbox.Config)
}

func (o Options) gap(t *testing.T, cap string) {
	t.Helper()
	if why, ok := o.Gaps[cap]; ok {
		t.Skipf("rung declares it lacks %s: %s", cap, why)
	}
}

// testWorkdir is the workdir the suites ask for; nested to check that
// missing parents are created.
const testWorkdir = "/workspace/proj"

func newConfig(t *testing.T, o Options, mut func(*sandbox.Config)) sandbox.Config {
	t.Helper()
	cfg := sandbox.Config{
		Workdir:        testWorkdir,
		Policy:         sandbox.Policy{Network: sandbox.NetworkDeny},
		CommandTimeout: 60 * time.Second,
		StateDir:       filepath.Join(t.TempDir(), "state"),
	}
	if mut != nil {
		mut(&cfg)
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	return cfg
}

func create(t *testing.T, r sandbox.Rung, cfg sandbox.Config) sandbox.Sandbox {
	t.Helper()
	sb, err := r.Create(context.Background(), cfg)
	if err != nil {
		t.Fatalf("creating a %s sandbox: %v", r.Name(), err)
	}
	t.Cleanup(func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Errorf("closing the %s sandbox: %v", r.Name(), err)
		}
	})
	return sb
}

type execOpt func(*sandbox.ExecRequest)

func withTimeout(d time.Duration) execOpt { return func(r *sandbox.ExecRequest) { r.Timeout = d } }

func asUser(u string) execOpt { return func(r *sandbox.ExecRequest) { r.User = u } }

func sh(t *testing.T, sb sandbox.Sandbox, script string, opts ...execOpt) sandbox.ExecResult {
	t.Helper()
	req := sandbox.ExecRequest{Argv: []string{"sh", "-c", script}}
	for _, o := range opts {
		o(&req)
	}
	res, err := sb.Exec(t.Context(), req)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

func mustSh(t *testing.T, sb sandbox.Sandbox, script string, opts ...execOpt) string {
	t.Helper()
	res := sh(t, sb, script, opts...)
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stdout %q, stderr %q", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

func hasDenial(res sandbox.ExecResult, kinds ...string) bool {
	for _, d := range res.Denials {
		for _, k := range kinds {
			if d.Kind == k {
				return true
			}
		}
	}
	return false
}

// needPython skips (or fails under EVALSI_STRICT) when the host has no
// /usr/bin/python3, which the network and memory probes use.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "/usr/bin/python3", "required by the sandbox suites: "+err.Error())
	}
}

func trim(b []byte) string { return strings.TrimSpace(string(b)) }

func short(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		b = append(b[:200:200], "…"...)
	}
	return string(b)
}
