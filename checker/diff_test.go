package checker

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"evals.si/sandbox"
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
