package checker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"evals.si/sandbox"
)

// DiffLimit caps a captured diff; a longer one is cut and ends with a note.
const DiffLimit = 32 << 20

// gitTimeout bounds each git command of a diff capture.
const gitTimeout = 5 * time.Minute

// diffExcludes leave out the files Evals.si places itself (.evalsi-*), at
// any depth, and whatever is under a directory so named.
var diffExcludes = []string{":(exclude,glob)**/.evalsi-*", ":(exclude,glob)**/.evalsi-*/**"}

// CaptureDiff returns the change made in workdir as a git diff: against
// HEAD, including untracked files that .gitignore does not ignore, leaving
// out .evalsi-* files, in `git diff --binary` form so it applies with
// `git apply`. isGit is false (and the diff empty) when workdir is not in a
// git work tree. The repository's index and worktree are not touched: the
// change is staged into a temporary index file under /tmp in the sandbox,
// which is removed afterwards (the blobs `git add` writes stay in the object
// store, unreferenced). A repository without commits diffs against the
// empty tree. Call it before the checker runs, which may change files.
func CaptureDiff(ctx context.Context, sb Sandbox, workdir string) (diff string, isGit bool, err error) {
	git := func(env map[string]string, args ...string) (sandbox.ExecResult, error) {
		e := map[string]string{"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
		for k, v := range env {
			e[k] = v
		}
		// safe.directory: the workdir may belong to another uid than the
		// one git runs as inside the sandbox. No fsmonitor: it would run
		// a program named by the repository's config.
		argv := append([]string{"git", "-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-C", workdir}, args...)
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Env: e, Workdir: workdir, Timeout: gitTimeout, OutputLimit: DiffLimit})
		if err != nil {
			return res, fmt.Errorf("capturing the diff: running git %s in the sandbox: %w", args[0], err)
		}
		return res, nil
	}
	must := func(res sandbox.ExecResult, what string) error {
		if res.TimedOut {
			return fmt.Errorf("capturing the diff: git %s timed out after %s", what, gitTimeout)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("capturing the diff: git %s exited %d: %s", what, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		return nil
	}

	if noGitDir(ctx, sb, workdir) {
		return "", false, nil
	}
	res, err := git(nil, "rev-parse", "--is-inside-work-tree")
	if err != nil {
		return "", false, err
	}
	if res.ExitCode == 127 {
		// No git in the sandbox: fine unless the workdir is a repository,
		// whose diff would then silently go missing.
		if _, rerr := sb.ReadFile(ctx, path.Join(workdir, ".git", "HEAD")); rerr == nil {
			return "", true, errors.New("capturing the diff: the workdir is a git repository but git is not installed in the sandbox's image")
		}
		return "", false, nil
	}
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "true" {
		return "", false, nil
	}

	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", true, fmt.Errorf("capturing the diff: %w", err)
	}
	index := "/tmp/.evalsi-diff-index-" + hex.EncodeToString(b)
	defer func() {
		// Best effort: the file is in the sandbox's /tmp.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = sb.Exec(cctx, sandbox.ExecRequest{Argv: []string{"rm", "-f", index}, Timeout: 30 * time.Second})
	}()
	env := map[string]string{"GIT_INDEX_FILE": index}

	head, err := git(nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil {
		return "", true, err
	}
	hasHead := head.ExitCode == 0
	if hasHead {
		if res, err = git(env, "read-tree", "HEAD"); err != nil {
			return "", true, err
		}
		if err := must(res, "read-tree HEAD"); err != nil {
			return "", true, err
		}
	}
	if res, err = git(env, append([]string{"add", "--all", "--", "."}, diffExcludes...)...); err != nil {
		return "", true, err
	}
	if err := must(res, "add"); err != nil {
		return "", true, err
	}
	args := []string{"diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-textconv"}
	if hasHead {
		args = append(args, "HEAD")
	}
	args = append(args, "--", ".")
	if res, err = git(env, args...); err != nil {
		return "", true, err
	}
	if err := must(res, "diff"); err != nil {
		return "", true, err
	}
	diff = string(res.Stdout)
	if res.Truncated {
		diff += fmt.Sprintf("\n[evalsi: diff truncated at %d bytes]\n", DiffLimit)
	}
	return diff, true, nil
}

// noGitDir reports whether neither workdir nor any directory above it has a
// .git entry, which git's own discovery needs: then the workdir is not in a
// work tree and no command has to run to learn it (most tasks' workdirs
// are not repositories). Any other answer than "does not exist" (a .git
// directory cannot be read as a file; a rung may fail differently) leaves
// the question to git. Only GIT_DIR set in the sandbox's environment, which
// this does not see, could make git find a repository without one.
func noGitDir(ctx context.Context, sb Sandbox, workdir string) bool {
	dir := path.Clean(workdir)
	if !path.IsAbs(dir) {
		return false
	}
	for {
		if _, err := sb.ReadFile(ctx, path.Join(dir, ".git")); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
		if dir == "/" {
			return true
		}
		dir = path.Dir(dir)
	}
}
