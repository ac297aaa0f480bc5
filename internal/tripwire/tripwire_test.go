// Package tripwire holds a test that fails when code outside the sandbox
// rungs can start processes: model output may only ever run through a
// sandbox, so os/exec and exec(2) are confined to the packages whose job is
// to run commands inside one.
package tripwire

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// allowed lists the packages (module-relative directories) that may start
// processes, each with why.
var allowed = map[string]string{
	"sandbox/bwrap":                 "the bubblewrap rung starts bwrap",
	"sandbox/landlock":              "the Landlock rung re-executes its launcher and execs the command after restricting itself",
	"sandbox/host":                  "the host rung runs commands on the host, only when a spec explicitly allows it",
	"sandbox/smolvm":                "the smolvm rung starts microVMs through the smolvm CLI",
	"sandbox/vm":                    "the microVM rungs' shared half: makes root disks and overlays with mkfs.ext4 and qemu-img (no model output runs here)",
	"sandbox/qemu":                  "the qemu rung starts qemu-system-x86_64",
	"sandbox/vm/vmproc":             "starts the microVM rungs' VMM processes (qemu, firecracker) with their death signal",
	"sandbox/firecracker":           "the firecracker rung starts firecracker (or its jailer)",
	"sandbox/vm/guest":              "evalsi-guest, the init inside a microVM: starts the guest's commands there",
	"cmd/evalsi-guest":              "evalsi-guest's main, the init inside a microVM",
	"internal/testenv/vmtest":       "test support only: builds evalsi-guest and runs scripts/build-vm-kernel.sh --cached for the microVM tests",
	"sandbox/userns":                "starts a rung's process (bwrap, the landlock launcher) as root of a new user namespace, through newuidmap/newgidmap when the engine is not root",
	"sandbox/docker":                "the docker rung (uses the Engine API today; listed in case it shells out to docker)",
	"sandbox/sandboxtest":           "test support only (imported by rung tests): starts the host processes the escape suite attacks",
	"internal/testenv/benchimage":   "test support only: runs scripts/build-local-image.sh to build the offline benchmark image",
	"internal/testenv/nethost":      "test support only: runs ip(8) to make a test host in a network namespace of the test's own",
	"internal/testenv/aptrepo":      "test support only: runs scripts/build-apt-repo.sh to build the test package repository",
	"internal/testenv/swebenchref":  "test support only: runs the official swebench package's reference scripts (python/adapters/swebench) for the differential tests",
	"internal/testenv/engineuser":   "test support only: re-runs a rung's test binary as an unprivileged engine user",
	"internal/testenv/pgtest":       "test support only: runs initdb and postgres for a throwaway PostgreSQL cluster on loopback",
	"internal/testenv/servertest":   "test support only: builds evalsid and runs evalsid serve and evalsid worker processes on loopback for the server tests",
	"sandbox/pod/internal/helper":   "the pod rung's helper, which runs inside the sandbox pod only (copied in by the pod's init container) and starts the sandbox's commands there",
	"internal/testenv/kubetest":     "test support only: runs etcd, the Kubernetes components, containerd and ctr on loopback and a bridge of its own for the Kubernetes tests",
	"internal/testenv/s3test":       "test support only: runs scripts/build-versitygw.sh --cached and versitygw on a loopback port for the S3 storage tests",
	"internal/testenv/registrytest": "test support only: runs docker-registry on a loopback port for the sandbox pool's registry tests",
	"internal/testenv/jaegertest":   "test support only: runs scripts/build-jaeger.sh --cached and the cached jaeger binary, on loopback ports, for the traces dataset tests",
	"bench/server":                  "a benchmark command, not the product: starts its own PostgreSQL (initdb, postgres) and the evalsid serve and worker processes it measures",
	"harness/external":              "starts the harness.external command or Python shim the spec names; it only serves the protocol, model output still runs in the sandbox via Worker.Exec (BFCL's adapter, which needs no sandbox, runs a model's calls only as checked calls of BFCL's simulated classes, in rlimited children)",
	"bench/peers":                   "a benchmark command, not the product: installs the peer harnesses (pip, uv), builds docker compose and runs inspect eval, the way their users run them, to measure them beside Evals.si",
	"bench/sandbox":                 "a benchmark command, not the product: times a bare fork/exec of bash -c true, the floor a sandboxed command is compared with",
	"bench/bfclrate":                "a benchmark command, not the product: runs bfcl-eval's checker directly in the bfcl adapter's environment, to compare with the rate through the engine",

	// The bwrap rung's half inside a sandbox.
	"sandbox/execproto": "the exec server, PID 1 inside a bwrap sandbox or a microVM guest, starts its commands there",

	// Not a rung: starts processes that are not model output.
	"agent/tools/mcptools": "starts the spec author's stdio MCP servers (harness.builtin.tools.mcp[].command); the go-sdk's CommandTransport takes an *exec.Cmd",
}

// forbidden calls, as package.Func selectors, besides importing os/exec.
var forbiddenCalls = map[string]bool{
	"syscall.Exec": true, "unix.Exec": true, "syscall.ForkExec": true, "syscall.StartProcess": true,
	"os.StartProcess": true, "unix.ForkExec": true,
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

func TestOnlySandboxRungsStartProcesses(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if _, ok := allowed[rel]; ok {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, v := range violations(fset, f) {
			t.Errorf("%s: only sandbox rungs may start processes (see allowed in this test)", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: the walk is not seeing the module", checked)
	}
}

// violations lists where a file imports os/exec or calls a process-starting
// function.
func violations(fset *token.FileSet, f *ast.File) []string {
	var out []string
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "os/exec" {
			out = append(out, fset.Position(imp.Pos()).String()+" imports os/exec")
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && forbiddenCalls[id.Name+"."+sel.Sel.Name] {
			out = append(out, fmt.Sprintf("%s calls %s.%s", fset.Position(sel.Pos()), id.Name, sel.Sel.Name))
		}
		return true
	})
	return out
}

// TestTripwireCatches makes sure the check above is not vacuous.
func TestTripwireCatches(t *testing.T) {
	src := `package x
import "os/exec"
import "syscall"
func f() { exec.Command("sh"); syscall.Exec("/bin/sh", nil, nil) }`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v := violations(fset, f); len(v) != 2 {
		t.Fatalf("tripwire found %v, want the import and the call", v)
	}
}
