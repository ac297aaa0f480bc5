package bwrap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"evals.si/sandbox"
)

// Sandboxes whose state dirs share a parent share one stub layer, which
// outlives them; each still works (its mount points come from the stub),
// and one sandbox's writes never reach another through it.
func TestSandboxesShareOneStub(t *testing.T) {
	r := newRung(t)
	ctx := context.Background()
	parent := t.TempDir()
	var sbs []sandbox.Sandbox
	for _, name := range []string{"sb-a", "sb-b"} {
		sb, err := r.Create(ctx, sandbox.Config{Workdir: "/workspace", StateDir: filepath.Join(parent, name)})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	stubs, _ := filepath.Glob(filepath.Join(parent, ".bwrap-stub-*"))
	if len(stubs) != 1 || !strings.HasSuffix(stubs[0], "-host") {
		t.Fatalf("stubs in the parent: %v, want one for sandboxes without an image", stubs)
	}
	for i, sb := range sbs {
		if s := sb.(*Sandbox); !s.sharedStub || s.stub != stubs[0] {
			t.Errorf("sandbox %d uses stub %s (shared %v), want %s", i, s.stub, s.sharedStub, stubs[0])
		}
	}
	res, err := sbs[0].Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo mine > /tmp/x && echo w > /workspace/w && test -d /proc/self && test -c /dev/null"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("first sandbox: %+v, %v", res, err)
	}
	res, err = sbs[1].Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "test ! -e /tmp/x && test ! -e /workspace/w"}})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("the second sandbox sees the first one's files: %+v, %v", res, err)
	}
	for _, sb := range sbs {
		if err := sb.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(stubs[0], ".evalsi", "empty")); err != nil {
		t.Errorf("closing the sandboxes removed the shared stub: %v", err)
	}
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		if e.Name() != filepath.Base(stubs[0]) {
			t.Errorf("left in the parent after Close: %s", e.Name())
		}
	}
}

// Concurrent first uses build the stub once into place and leave no
// temporary directory behind.
func TestSharedStubConcurrentBuild(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = sharedStub(dir, false)
		}()
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("sharedStub %d = %q, %v; want %q", i, paths[i], errs[i], paths[0])
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v, want only the stub", names)
	}
	for _, p := range []string{"proc", "dev", "tmp", ".evalsi/evalsi", ".evalsi/proxy.sock", ".evalsi/empty"} {
		if _, err := os.Lstat(filepath.Join(paths[0], p)); err != nil {
			t.Errorf("stub lacks %s: %v", p, err)
		}
	}
}
