package checker

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
)

const gitID = "git -c user.name=t -c user.email=t@example.com"

func TestCaptureDiff(t *testing.T) {
	requireGit(t)
	sb := newSandbox(t)
	sh(t, sb, `set -e
git init -q .
printf 'def add(a, b):\n    return a - b\n' > calc.py
printf 'keep\n' > same.txt
printf 'old\n' > staged.txt
printf '*.log\n' > .gitignore
`+gitID+` add -A && `+gitID+` commit -qm init
# The agent's work: a modification, a staged edit, untracked files.
printf 'def add(a, b):\n    return a + b\n' > calc.py
printf 'new\n' > staged.txt && git add staged.txt
mkdir -p pkg && printf 'x = 1\n' > pkg/new.py
printf '\000\001binary' > blob.bin
# Left out: ignored files and the files Evals.si places.
printf 'noise\n' > build.log
printf 'gold\n' > .evalsi-gold.patch
mkdir -p sub/.evalsi-cache && printf 'c\n' > sub/.evalsi-cache/f && printf 'n\n' > sub/.evalsi-note
`)
	indexBefore, err := sb.ReadFile(t.Context(), testWorkdir+"/.git/index")
	if err != nil {
		t.Fatal(err)
	}
	statusBefore := sh(t, sb, "git status --porcelain=v1 --untracked-files=all")

	diff, isGit, err := CaptureDiff(t.Context(), sb, testWorkdir)
	if err != nil {
		t.Fatalf("CaptureDiff: %v", err)
	}
	if !isGit {
		t.Fatal("isGit = false for a git workdir")
	}
	for _, want := range []string{
		"diff --git a/calc.py b/calc.py", "-    return a - b", "+    return a + b",
		"diff --git a/staged.txt b/staged.txt", "+new",
		"diff --git a/pkg/new.py b/pkg/new.py", "new file mode", "+x = 1",
		"diff --git a/blob.bin b/blob.bin", "GIT binary patch",
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	for _, unwanted := range []string{"same.txt", "build.log", ".evalsi-", ".gitignore"} {
		if strings.Contains(diff, unwanted) {
			t.Errorf("diff mentions %q:\n%s", unwanted, diff)
		}
	}

	// The repository's index and worktree are as they were.
	indexAfter, err := sb.ReadFile(t.Context(), testWorkdir+"/.git/index")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(indexBefore, indexAfter) {
		t.Error("CaptureDiff changed .git/index")
	}
	if after := sh(t, sb, "git status --porcelain=v1 --untracked-files=all"); after != statusBefore {
		t.Errorf("git status changed:\nbefore:\n%s\nafter:\n%s", statusBefore, after)
	}
	if left := sh(t, sb, "ls -a /tmp"); strings.Contains(left, "evalsi-diff-index") {
		t.Errorf("temporary index left in /tmp: %s", left)
	}

	// The diff is a real patch: it reverses cleanly onto the worktree.
	if err := sb.WriteFile(t.Context(), "/tmp/agent.patch", []byte(diff), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "git apply --check -R /tmp/agent.patch")
}

func TestCaptureDiffNoCommits(t *testing.T) {
	requireGit(t)
	sb := newSandbox(t)
	sh(t, sb, "git init -q . && printf 'hello\\n' > a.txt && printf 'p\\n' > .evalsi-prompt")
	diff, isGit, err := CaptureDiff(t.Context(), sb, testWorkdir)
	if err != nil || !isGit {
		t.Fatalf("CaptureDiff = isGit %v, err %v", isGit, err)
	}
	if !strings.Contains(diff, "diff --git a/a.txt b/a.txt") || !strings.Contains(diff, "+hello") || strings.Contains(diff, ".evalsi-") {
		t.Errorf("diff of a repository without commits:\n%s", diff)
	}
	if _, err := sb.ReadFile(t.Context(), testWorkdir+"/.git/index"); err == nil {
		t.Error("CaptureDiff created .git/index in a repository that had none")
	}
}

func TestCaptureDiffUnchangedAndNotGit(t *testing.T) {
	requireGit(t)
	sb := newSandbox(t)
	sh(t, sb, "mkdir -p repo plain && cd repo && git init -q . && echo a > a && "+gitID+" add a && "+gitID+" commit -qm a && cd ../plain && echo b > b")

	diff, isGit, err := CaptureDiff(t.Context(), sb, testWorkdir+"/repo")
	if err != nil || !isGit || diff != "" {
		t.Errorf("unchanged repo: diff %q, isGit %v, err %v; want empty diff, true, nil", diff, isGit, err)
	}
	diff, isGit, err = CaptureDiff(t.Context(), sb, testWorkdir+"/plain")
	if err != nil || isGit || diff != "" {
		t.Errorf("plain directory: diff %q, isGit %v, err %v; want empty, false, nil", diff, isGit, err)
	}
}

// A workdir in a subdirectory of a repository diffs only that subdirectory.
func TestCaptureDiffSubdirectory(t *testing.T) {
	requireGit(t)
	sb := newSandbox(t)
	sh(t, sb, "git init -q . && mkdir svc other && echo 1 > svc/f && echo 1 > other/g && "+gitID+" add -A && "+gitID+" commit -qm a && echo 2 > svc/f && echo 2 > other/g")
	diff, isGit, err := CaptureDiff(t.Context(), sb, testWorkdir+"/svc")
	if err != nil || !isGit {
		t.Fatalf("CaptureDiff = isGit %v, err %v", isGit, err)
	}
	if !strings.Contains(diff, "a/svc/f") || strings.Contains(diff, "other/g") {
		t.Errorf("subdirectory diff:\n%s", diff)
	}
}

var _ Sandbox = sandbox.Sandbox(nil)

// execCounter counts the commands run through a sandbox.
type execCounter struct {
	sandbox.Sandbox
	n int
}

func (c *execCounter) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	c.n++
	return c.Sandbox.Exec(ctx, req)
}

// A workdir with no .git at or above it is known not to be a repository
// without running git; one below a repository still runs it.
func TestCaptureDiffNoGitDirRunsNothing(t *testing.T) {
	requireGit(t)
	sb := newSandbox(t)
	sh(t, sb, "mkdir -p plain repo/sub && echo b > plain/b && cd repo && git init -q .")
	c := &execCounter{Sandbox: sb}
	diff, isGit, err := CaptureDiff(t.Context(), c, testWorkdir+"/plain")
	if err != nil || isGit || diff != "" || c.n != 0 {
		t.Errorf("plain directory: diff %q, isGit %v, err %v, %d commands; want empty, false, nil, none", diff, isGit, err, c.n)
	}
	if _, isGit, err = CaptureDiff(t.Context(), c, testWorkdir+"/repo/sub"); err != nil || !isGit || c.n == 0 {
		t.Errorf("directory below a repository: isGit %v, err %v, %d commands; want true, nil, git run", isGit, err, c.n)
	}
}

// The marker a program of the agent's writes when git runs it.
const marker = "/tmp/agent-program-ran"

// evil is a program an attack configures git to run: it leaves the marker
// and passes its input on with every "+" turned into "-", so a capture that
// runs it shows a different change.
const evil = `#!/bin/sh
touch ` + marker + `
exec sed 's/+/-/g'
`

// TestCaptureDiffIgnoresAgentGitConfig: configuration the agent can write
// (the repository's .git/config and hooks, .gitattributes, the global
// config in its home, a git of its own on PATH) neither runs a program nor
// changes the captured diff. Each attack is applied after a first capture;
// the second capture must equal the first, show the real change, and leave
// no marker. Each case also runs plain git once afterwards to prove the
// attack is live (it leaves the marker), so the test cannot pass vacuously.
func TestCaptureDiffIgnoresAgentGitConfig(t *testing.T) {
	requireGit(t)
	cases := []struct {
		name string
		// tree is part of the agent's change in the work tree, made before
		// the first capture (it is in both diffs).
		tree string
		// attack is configuration outside the work tree's content.
		attack string
		// live runs git as an unprotected capture would, and must leave
		// the marker.
		live string
	}{
		{
			name:   "clean filter",
			tree:   `printf '*.py filter=evil\n' > .gitattributes`,
			attack: `git config filter.evil.clean /tmp/evil && git config filter.evil.smudge /tmp/evil && git config filter.evil.required true`,
			live:   `GIT_INDEX_FILE=/tmp/i git add -A`,
		},
		{
			name:   "process filter",
			tree:   `printf '*.py filter=evil\n' > .gitattributes`,
			attack: `git config filter.evil.process /tmp/evil`,
			live:   `GIT_INDEX_FILE=/tmp/i git add -A`,
		},
		{
			name:   "textconv and diff driver",
			tree:   `printf '*.py diff=evil\n' > .gitattributes`,
			attack: `git config diff.evil.textconv /tmp/evil && git config diff.evil.command /tmp/evil`,
			live:   `git diff HEAD`,
		},
		{
			name:   "diff.external",
			attack: `git config diff.external /tmp/evil`,
			live:   `git diff HEAD`,
		},
		{
			name:   "fsmonitor",
			attack: `git config core.fsmonitor /tmp/evil && cp /tmp/evil .git/hooks/fsmonitor-watchman`,
			live:   `git status`,
		},
		{
			name:   "core.hooksPath hook",
			attack: `mkdir -p /tmp/hooks && cp /tmp/evil /tmp/hooks/post-index-change && git config core.hooksPath /tmp/hooks`,
			live:   `GIT_INDEX_FILE=/tmp/i git read-tree HEAD`,
		},
		{
			name:   "repository hook",
			attack: `cp /tmp/evil .git/hooks/post-index-change`,
			live:   `GIT_INDEX_FILE=/tmp/i git read-tree HEAD`,
		},
		{
			name:   "include",
			tree:   `printf '*.py filter=evil\n' > .gitattributes`,
			attack: `printf '[filter "evil"]\n\tclean = /tmp/evil\n' > /tmp/inc.cfg && git config include.path /tmp/inc.cfg`,
			live:   `GIT_INDEX_FILE=/tmp/i git add -A`,
		},
		{
			name: "global config and attributes in the home",
			attack: `printf '[filter "evil"]\n\tclean = /tmp/evil\n[diff]\n\texternal = /tmp/evil\n' > $HOME/.gitconfig &&
mkdir -p $HOME/.config/git && printf '* filter=evil\n' > $HOME/.config/git/attributes`,
			live: `git diff HEAD`,
		},
		{
			// A repository of the agent's inside the work tree, with its own
			// configuration: the capture records it as a gitlink without
			// running anything of it.
			name: "nested repository",
			tree: `mkdir sub && cd sub && git init -q . && printf 'x\n' > g && ` + gitID + ` add -A && ` + gitID + ` commit -qm sub`,
			attack: `cd sub && git config core.fsmonitor /tmp/evil && git config filter.evil.clean /tmp/evil &&
printf '* filter=evil\n' > .git/info/attributes && cp /tmp/evil .git/hooks/post-index-change`,
			live: `cd sub && git status`,
		},
		{
			name:   "info/attributes",
			attack: `printf '* filter=evil\n' > .git/info/attributes && git config filter.evil.clean /tmp/evil`,
			live:   `GIT_INDEX_FILE=/tmp/i git add -A`,
		},
		{
			name: "pager and ssh",
			attack: `git config core.pager /tmp/evil && git config pager.diff /tmp/evil && git config core.sshCommand /tmp/evil &&
git config credential.helper /tmp/evil && git config uploadpack.packObjectsHook /tmp/evil`,
			// ssh: the command runs before any connection is made.
			live: `git ls-remote ssh://git.invalid/r`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t)
			if err := sb.WriteFile(t.Context(), "/tmp/evil", []byte(evil), 0o755); err != nil {
				t.Fatal(err)
			}
			sh(t, sb, `set -e
git init -q . && mkdir -p .git/hooks .git/info
printf 'def add(a, b):\n    return a - b\n' > calc.py
`+gitID+` add -A && `+gitID+` commit -qm init
printf 'def add(a, b):\n    return a + b\n' > calc.py
printf 'x = 1 + 2\n' > new.py
`+tc.tree)
			want := captureDiff(t, sb)
			for _, s := range []string{"+    return a + b", "-    return a - b", "+x = 1 + 2"} {
				if !strings.Contains(want, s) {
					t.Fatalf("diff before the attack lacks %q:\n%s", s, want)
				}
			}
			sh(t, sb, tc.attack)
			if got := captureDiff(t, sb); got != want {
				t.Errorf("the attack changed the diff:\nbefore:\n%s\nafter:\n%s", want, got)
			}
			if _, err := sb.ReadFile(t.Context(), marker); err == nil {
				t.Errorf("a program of the agent's ran during the capture")
			}
			// Plain git runs the agent's program: the attack is live.
			// A bound, not a measure: the process filter's handshake never
			// comes, so plain git would wait for it.
			_, _ = sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", tc.live}, Workdir: testWorkdir, Timeout: 10 * time.Second})
			if _, err := sb.ReadFile(t.Context(), marker); err != nil {
				t.Errorf("plain git (%s) did not run the attack's program either: the test proves nothing", tc.live)
			}
		})
	}
}

// Attributes that change what git add stores or how git diff shows it, and
// a core.worktree pointing at an unchanged decoy, do not change the diff:
// it shows the real change as text.
func TestCaptureDiffIgnoresContentRewrites(t *testing.T) {
	requireGit(t)
	cases := []struct{ name, attack string }{
		{"binary attribute", `printf '*.py binary\n' > .gitattributes`},
		{"-diff attribute", `printf '*.py -diff\n' > .gitattributes`},
		{"working-tree-encoding", `printf '*.py working-tree-encoding=UTF-16\n' > .gitattributes`},
		{"ident and eol", `printf '*.py ident eol=crlf text\n' > .gitattributes && git config core.autocrlf true`},
		{"core.worktree decoy", `mkdir /tmp/decoy && git show HEAD:calc.py > /tmp/decoy/calc.py && git config core.worktree /tmp/decoy`},
		{"commit-graph", `git config core.commitGraph true && git commit-graph write --reachable`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t)
			sh(t, sb, `set -e
git init -q .
printf 'def add(a, b):\n    return a - b  # $Id$\n' > calc.py
`+gitID+` add -A && `+gitID+` commit -qm init
printf 'def add(a, b):\n    return a + b  # $Id$\n' > calc.py
`+tc.attack)
			diff := captureDiff(t, sb)
			for _, s := range []string{"-    return a - b  # $Id$\n", "+    return a + b  # $Id$\n"} {
				if !strings.Contains(diff, s) {
					t.Errorf("diff lacks %q:\n%s", s, diff)
				}
			}
			if strings.Contains(diff, "GIT binary patch") || strings.Contains(diff, "Binary files") {
				t.Errorf("the change is hidden as binary:\n%s", diff)
			}
		})
	}
}

// A git the agent put on the sandbox's PATH (a directory it can write, as a
// project's node_modules/.bin is) is not the git the capture runs.
func TestCaptureDiffIgnoresGitOnSandboxPath(t *testing.T) {
	requireGit(t)
	sb, err := bwraptest.Rung(t).Create(t.Context(), sandbox.Config{
		Workdir: testWorkdir, StateDir: t.TempDir(), CommandTimeout: time.Minute,
		Env: map[string]string{"PATH": testWorkdir + "/bin:/usr/local/bin:/usr/bin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	sh(t, sb, `set -e
git init -q . && printf 'a\n' > f && `+gitID+` add -A && `+gitID+` commit -qm init && printf 'b\n' > f
mkdir bin && printf '#!/bin/sh\ntouch `+marker+`\necho "diff --git a/fake b/fake"\n' > bin/git && chmod +x bin/git`)
	sh(t, sb, "git --version")
	if _, err := sb.ReadFile(t.Context(), marker); err != nil {
		t.Fatal("the fake git is not the one the sandbox's PATH finds: the test proves nothing")
	}
	sh(t, sb, "rm "+marker)
	diff := captureDiff(t, sb)
	if !strings.Contains(diff, "diff --git a/f b/f") || !strings.Contains(diff, "\n+b\n") || strings.HasPrefix(diff, "diff --git a/fake") {
		t.Errorf("diff:\n%s", diff)
	}
	if _, err := sb.ReadFile(t.Context(), marker); err == nil {
		t.Error("the capture ran the agent's git")
	}
}

// System and global configuration are not read: here the sandbox's
// environment points git at files in /tmp, as an image whose /etc/gitconfig
// the agent can write would be (the no-image rung's /etc is read-only).
func TestCaptureDiffIgnoresSystemAndGlobalConfig(t *testing.T) {
	requireGit(t)
	sb, err := bwraptest.Rung(t).Create(t.Context(), sandbox.Config{
		Workdir: testWorkdir, StateDir: t.TempDir(), CommandTimeout: time.Minute,
		Env: map[string]string{"GIT_CONFIG_SYSTEM": "/tmp/system.cfg", "GIT_CONFIG_GLOBAL": "/tmp/global.cfg"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	if err := sb.WriteFile(t.Context(), "/tmp/evil", []byte(evil), 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, sb, `set -e
git init -q . && printf 'a\n' > f && `+gitID+` add -A && `+gitID+` commit -qm init && printf 'b\n' > f`)
	want := captureDiff(t, sb)
	sh(t, sb, `printf '[filter "evil"]\n\tclean = /tmp/evil\n[core]\n\tattributesFile = /tmp/attrs\n' > /tmp/system.cfg &&
printf '[diff]\n\texternal = /tmp/evil\n' > /tmp/global.cfg && printf '* filter=evil\n' > /tmp/attrs`)
	if got := captureDiff(t, sb); got != want || !strings.Contains(got, "\n+b\n") {
		t.Errorf("diff after the attack:\n%s\nbefore:\n%s", got, want)
	}
	if _, err := sb.ReadFile(t.Context(), marker); err == nil {
		t.Error("a program of the agent's ran during the capture")
	}
	_, _ = sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"git", "diff", "HEAD"}, Workdir: testWorkdir})
	if _, err := sb.ReadFile(t.Context(), marker); err != nil {
		t.Error("plain git did not run the attack's program either: the test proves nothing")
	}
}

func captureDiff(t *testing.T, sb sandbox.Sandbox) string {
	t.Helper()
	diff, isGit, err := CaptureDiff(t.Context(), sb, testWorkdir)
	if err != nil || !isGit {
		t.Fatalf("CaptureDiff: isGit %v, err %v", isGit, err)
	}
	return diff
}

// Against the base recorded before the agent ran, the diff is the agent's
// whole change however it moved HEAD; a repository it broke or removed is
// a note in the diff, not an infrastructure error.
func TestCaptureDiffSince(t *testing.T) {
	requireGit(t)
	cases := []struct {
		name, agent string
		want        []string // in the diff
	}{
		{"uncommitted change", `printf 'b\n' > f`, []string{"-a", "+b"}},
		{"committed change", `printf 'b\n' > f && ` + gitID + ` commit -qam mine`, []string{"-a", "+b"}},
		{"reset to another history", `git checkout -q --orphan other && printf 'c\n' > f && ` + gitID + ` commit -qam other`, []string{"-a", "+c"}},
		{"amended base", `printf 'b\n' > f && ` + gitID + ` commit -q --amend -am init`, []string{"-a", "+b"}},
		{"repository removed", `rm -rf .git && printf 'b\n' > f`, []string{"[evalsi: no diff: the repository at /work/task is gone"}},
		{"objects removed", `rm -rf .git/objects/* && printf 'b\n' > f`, []string{"[evalsi: no diff: the repository at /work/task cannot be read"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t)
			sh(t, sb, "git init -q . && printf 'a\\n' > f && "+gitID+" add -A && "+gitID+" commit -qm init")
			base, err := RecordBase(t.Context(), sb, testWorkdir)
			if err != nil || !base.IsGit() {
				t.Fatalf("RecordBase: %+v, %v", base, err)
			}
			sh(t, sb, tc.agent)
			diff, isGit, err := CaptureDiffSince(t.Context(), sb, testWorkdir, base)
			if err != nil || !isGit {
				t.Fatalf("CaptureDiffSince: isGit %v, err %v", isGit, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(diff, w) {
					t.Errorf("diff lacks %q:\n%s", w, diff)
				}
			}
		})
	}
	// A workdir below the top of the repository that the agent removed
	// diffs as removed files.
	sb0 := newSandbox(t)
	sh(t, sb0, "git init -q . && mkdir svc && printf 'a\\n' > svc/f && printf 'o\\n' > other && "+gitID+" add -A && "+gitID+" commit -qm init")
	base0, err := RecordBase(t.Context(), sb0, testWorkdir+"/svc")
	if err != nil {
		t.Fatal(err)
	}
	sh(t, sb0, "rm -rf svc && printf 'p\\n' > other")
	diff, _, err := CaptureDiffSince(t.Context(), sb0, testWorkdir+"/svc", base0)
	if err != nil || !strings.Contains(diff, "deleted file mode") || !strings.Contains(diff, "-a") || strings.Contains(diff, "other") {
		t.Errorf("removed workdir: err %v, diff:\n%s", err, diff)
	}

	// Without a repository, the base says so and the capture is
	// CaptureDiff's.
	sb := newSandbox(t)
	base, err := RecordBase(t.Context(), sb, testWorkdir)
	if err != nil || base.IsGit() {
		t.Fatalf("RecordBase of a plain directory: %+v, %v", base, err)
	}
	if diff, isGit, err := CaptureDiffSince(t.Context(), sb, testWorkdir, base); diff != "" || isGit || err != nil {
		t.Errorf("plain directory: %q, %v, %v", diff, isGit, err)
	}
}
