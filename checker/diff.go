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

// systemPath is the PATH git is found on: the image's system directories
// only, never a directory the sandbox's own PATH adds (a home's bin, the
// workdir's node_modules/.bin), where an agent that is not root could put a
// git of its own.
const systemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// neutralAttributes is the private git directory's info/attributes, which
// git ranks above every .gitattributes in the tree: it puts every attribute
// that changes what `git add` stores or how `git diff` shows it back to
// unspecified, so a .gitattributes the agent wrote (a filter, a diff driver,
// `binary` or `-diff` to hide text as a binary patch, an encoding, ident)
// changes nothing. The .gitattributes file itself is part of the diff.
const neutralAttributes = "* !text !eol !crlf !ident !filter !diff !merge !working-tree-encoding !whitespace\n"

// neutralConfig is every setting that could run a program or alter the
// captured content, set to its inert value on the command line, which wins
// over any configuration file. The private git directory's config and the
// disabled system and global files leave nothing to override; this is the
// second line, for gits that predate GIT_CONFIG_GLOBAL and for keys the
// sandbox's environment (GIT_CONFIG_COUNT…) could set.
var neutralConfig = []string{
	"safe.directory=*", // the workdir may belong to another uid than git runs as
	"core.fsmonitor=false",
	"core.hooksPath=/dev/null",
	"core.attributesFile=/dev/null",
	"core.excludesFile=/dev/null",
	"core.pager=cat",
	"core.autocrlf=false",
	"core.safecrlf=false",
	"core.commitGraph=false", // a commit-graph file can name another tree for HEAD
	"core.untrackedCache=false",
	"core.splitIndex=false",
	"core.sparseCheckout=false",
	"core.sshCommand=",
	"diff.external=",
	"diff.noprefix=false",
	"diff.mnemonicPrefix=false",
	"diff.relative=false",
	"diff.ignoreSubmodules=none",
	"credential.helper=",
	"uploadpack.packObjectsHook=",
	"color.ui=never",
}

// neutralEnv replaces every git variable that could redirect the capture
// to other files, change pathspec meaning or run a program; the sandbox's
// environment is the spec's, but the capture must not depend on it.
func neutralEnv(gitDir, worktree string) map[string]string {
	return map[string]string{
		"GIT_DIR":                          gitDir,
		"GIT_COMMON_DIR":                   gitDir,
		"GIT_WORK_TREE":                    worktree,
		"GIT_INDEX_FILE":                   gitDir + "/index",
		"GIT_OBJECT_DIRECTORY":             gitDir + "/objects",
		"GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
		"GIT_CONFIG_NOSYSTEM":              "1",
		"GIT_CONFIG_SYSTEM":                "/dev/null",
		"GIT_CONFIG_GLOBAL":                "/dev/null",
		"GIT_CONFIG_COUNT":                 "0",
		"GIT_CONFIG_PARAMETERS":            "",
		"GIT_ATTR_NOSYSTEM":                "1",
		"GIT_NO_REPLACE_OBJECTS":           "1",
		"GIT_EXTERNAL_DIFF":                "",
		"GIT_DIFF_OPTS":                    "",
		"GIT_PAGER":                        "cat",
		"GIT_SSH":                          "",
		"GIT_SSH_COMMAND":                  "",
		"GIT_ASKPASS":                      "",
		"GIT_TERMINAL_PROMPT":              "0",
		"GIT_OPTIONAL_LOCKS":               "0",
		"GIT_LITERAL_PATHSPECS":            "0",
		"GIT_GLOB_PATHSPECS":               "0",
		"GIT_NOGLOB_PATHSPECS":             "0",
		"GIT_ICASE_PATHSPECS":              "0",
		"GIT_NAMESPACE":                    "",
		// Old gits ignore GIT_CONFIG_GLOBAL: a home without a .gitconfig
		// (and no XDG config) keeps them off the agent's global files.
		"HOME":            gitDir,
		"XDG_CONFIG_HOME": gitDir,
		"PATH":            systemPath,
		"LC_ALL":          "C",
	}
}

// CaptureDiff returns the change made in workdir as a git diff: against
// HEAD, including untracked files that .gitignore does not ignore, leaving
// out .evalsi-* files, in `git diff --binary` form so it applies with
// `git apply`. isGit is false (and the diff empty) when workdir is not in a
// git work tree. A repository without commits diffs against the empty tree.
// Call it before the checker runs, which may change files. CaptureDiffSince
// diffs against the commit recorded before the agent ran instead, which an
// agent's commits and resets cannot move.
//
// The repository is the agent's to edit, so nothing in it may shape the
// capture. The work tree and git directory are found by reading files, not
// by asking git (core.worktree could point elsewhere), and git then runs
// with a private git directory under the sandbox's /tmp: its own empty
// config, hooks and info/attributes, the repository's objects as an
// alternate (read-only: new blobs go to the private directory, removed
// afterwards) and a private index. The repository's .git/config, hooks,
// info/attributes, info/exclude, commit-graph and replace refs are thus
// never read; system and global config and attributes are off; the
// settings and variables that run programs or change content (filters,
// textconv, external diff, fsmonitor, hooks, pager, includes, line-ending
// and encoding conversion) are forced inert. The repository's .git
// directory, index and work tree are not written. .gitignore files in the
// tree are honoured (they are part of the diff, where the judge sees them).
//
// What is trusted: the git program itself. It runs inside the sandbox,
// found on the system directories only (systemPath), not on the sandbox's
// PATH. An agent that is root in a sandbox whose root filesystem is
// writable can still replace the image's git (or its libraries) and forge
// the diff; read_only_root closes that. The diff is evidence for the judge,
// not what grades the task (the checker grades the end state), and it is
// never executed.
func CaptureDiff(ctx context.Context, sb Sandbox, workdir string) (diff string, isGit bool, err error) {
	repo, ok, err := findRepo(ctx, sb, workdir)
	if err != nil || !ok {
		return "", false, err
	}
	head, err := resolveHead(ctx, sb, repo)
	if err != nil {
		return "", true, fmt.Errorf("capturing the diff: %w", err)
	}
	return capture(ctx, sb, workdir, repo, head)
}

// Base is what a diff is taken against: where the repository was and the
// commit HEAD named before the agent ran. The zero Base is a workdir that
// was not in a git work tree.
type Base struct {
	repo   repository
	commit string // "" for a repository without commits
	isGit  bool
}

// IsGit reports whether the workdir was in a git work tree.
func (b Base) IsGit() bool { return b.isGit }

// RecordBase notes the repository workdir is in and its HEAD commit, from
// the files alone (no command runs). Call it after setup, before the agent.
func RecordBase(ctx context.Context, sb Sandbox, workdir string) (Base, error) {
	repo, ok, err := findRepo(ctx, sb, workdir)
	if err != nil || !ok {
		return Base{}, err
	}
	head, err := resolveHead(ctx, sb, repo)
	if err != nil {
		return Base{}, fmt.Errorf("recording the diff's base: %w", err)
	}
	return Base{repo: repo, commit: head, isGit: true}, nil
}

// CaptureDiffSince is CaptureDiff against base: the work tree as the agent
// left it, compared with the commit recorded before it ran, wherever the
// agent moved HEAD since (a commit of its own, a reset). A repository the
// agent broke or removed (the base commit's objects gone, .git deleted) is
// no infrastructure error: the diff is then a note saying so, for the judge
// to read, and err is nil. Errors are the sandbox's (a command that could
// not run, git missing, a timeout).
func CaptureDiffSince(ctx context.Context, sb Sandbox, workdir string, base Base) (diff string, isGit bool, err error) {
	if !base.isGit {
		return CaptureDiff(ctx, sb, workdir)
	}
	if _, err := sb.ReadFile(ctx, path.Join(base.repo.gitDir, "HEAD")); err != nil {
		return fmt.Sprintf("[evalsi: no diff: the repository at %s is gone after the agent ran (%s/HEAD cannot be read)]\n", base.repo.worktree, base.repo.gitDir), true, nil
	}
	diff, isGit, err = capture(ctx, sb, workdir, base.repo, base.commit)
	var re *repoError
	if errors.As(err, &re) {
		return fmt.Sprintf("[evalsi: no diff: the repository at %s cannot be read after the agent ran: %s]\n", base.repo.worktree, re.msg), true, nil
	}
	return diff, isGit, err
}

// repoError is git failing on the repository's content, as opposed to the
// sandbox failing to run it.
type repoError struct{ msg string }

func (e *repoError) Error() string { return "capturing the diff: " + e.msg }

// capture diffs the part of repo's work tree under workdir against commit
// ("": the empty tree). Git runs at the top of the work tree, so a workdir
// the agent removed diffs as removed files.
func capture(ctx context.Context, sb Sandbox, workdir string, repo repository, commit string) (diff string, isGit bool, err error) {
	scope := "."
	if rel := strings.TrimPrefix(path.Clean(workdir), repo.worktree); rel != "" {
		scope = ":(literal)" + strings.TrimPrefix(rel, "/")
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", true, fmt.Errorf("capturing the diff: %w", err)
	}
	priv := "/tmp/.evalsi-diff-" + hex.EncodeToString(b)
	defer func() {
		// Best effort: the directory is in the sandbox's /tmp.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = sb.Exec(cctx, sandbox.ExecRequest{Argv: []string{"rm", "-rf", priv}, Env: map[string]string{"PATH": systemPath}, Timeout: 30 * time.Second})
	}()
	if err := makePrivateGitDir(ctx, sb, priv, repo, len(commit) == 64); err != nil {
		return "", true, err
	}

	env := neutralEnv(priv, repo.worktree)
	git := func(args ...string) error {
		argv := []string{"git", "--no-pager"}
		for _, c := range neutralConfig {
			argv = append(argv, "-c", c)
		}
		argv = append(argv, args...)
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Env: env, Workdir: repo.worktree, Timeout: gitTimeout, OutputLimit: DiffLimit})
		switch {
		case err != nil:
			return fmt.Errorf("capturing the diff: running git %s in the sandbox: %w", args[0], err)
		case res.TimedOut:
			return fmt.Errorf("capturing the diff: git %s timed out after %s", args[0], gitTimeout)
		case res.ExitCode == 127:
			return fmt.Errorf("capturing the diff: the workdir is in a git repository (%s) but git is not installed in the sandbox's image (looked on %s)", repo.worktree, systemPath)
		case res.ExitCode != 0:
			return &repoError{fmt.Sprintf("git %s exited %d: %s", args[0], res.ExitCode, strings.TrimSpace(string(res.Stderr)))}
		}
		if args[0] == "diff" {
			diff = string(res.Stdout)
			if res.Truncated {
				diff += fmt.Sprintf("\n[evalsi: diff truncated at %d bytes]\n", DiffLimit)
			}
		}
		return nil
	}
	if commit != "" {
		if err := git("read-tree", commit); err != nil {
			return "", true, err
		}
	}
	if err := git(append([]string{"add", "--all", "--", scope}, diffExcludes...)...); err != nil {
		return "", true, err
	}
	args := []string{"diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
		"--ignore-submodules=none", "--src-prefix=a/", "--dst-prefix=b/"}
	if commit != "" {
		args = append(args, commit)
	}
	if err := git(append(args, "--", scope)...); err != nil {
		return "", true, err
	}
	return diff, true, nil
}

// repository is where a work tree's git data lives.
type repository struct {
	worktree string // the directory holding .git
	gitDir   string // its git directory (HEAD, per-worktree refs)
	common   string // the shared git directory (objects, refs); gitDir unless a linked worktree
}

// findRepo finds the repository workdir is in the way git's discovery
// does, from the files alone: the nearest directory at or above workdir
// with a .git that is a git directory (a directory with HEAD) or a gitfile
// ("gitdir: path", as linked worktrees and submodules have). Most tasks'
// workdirs are not repositories; then no command runs at all. GIT_DIR set
// in the sandbox's environment is not followed.
func findRepo(ctx context.Context, sb Sandbox, workdir string) (repository, bool, error) {
	dir := path.Clean(workdir)
	if !path.IsAbs(dir) {
		return repository{}, false, fmt.Errorf("capturing the diff: workdir %q is not an absolute path", workdir)
	}
	for {
		dotGit := path.Join(dir, ".git")
		b, err := sb.ReadFile(ctx, dotGit)
		var gitDir string
		switch {
		case err == nil:
			// A gitfile; anything else is not a repository to git either.
			if p, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:"); ok {
				gitDir = resolvePath(dir, strings.TrimSpace(p))
			}
		case errors.Is(err, fs.ErrNotExist):
		case ctx.Err() != nil:
			return repository{}, false, ctx.Err()
		default:
			gitDir = dotGit // a directory (it cannot be read as a file)
		}
		if gitDir != "" {
			if _, err := sb.ReadFile(ctx, path.Join(gitDir, "HEAD")); err == nil {
				common := gitDir
				if c, err := sb.ReadFile(ctx, path.Join(gitDir, "commondir")); err == nil {
					common = resolvePath(gitDir, strings.TrimSpace(string(c)))
				}
				return repository{worktree: dir, gitDir: gitDir, common: common}, true, nil
			}
		}
		if dir == "/" {
			return repository{}, false, nil
		}
		dir = path.Dir(dir)
	}
}

func resolvePath(base, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(base, p)
}

// resolveHead returns the commit id HEAD names, from the ref files ("" for
// a branch without commits yet). The ids are checked as hex; git verifies
// the objects they name when it reads them.
func resolveHead(ctx context.Context, sb Sandbox, repo repository) (string, error) {
	b, err := sb.ReadFile(ctx, path.Join(repo.gitDir, "HEAD"))
	if err != nil {
		return "", fmt.Errorf("reading %s/HEAD: %w", repo.gitDir, err)
	}
	ref := strings.TrimSpace(string(b))
	for range 5 { // symbolic refs may chain; git stops at 5 too
		name, ok := strings.CutPrefix(ref, "ref:")
		if !ok {
			if !isObjectID(ref) {
				return "", fmt.Errorf("%s/HEAD holds %.80q, which is neither a ref nor an object id", repo.gitDir, ref)
			}
			return ref, nil
		}
		name = strings.TrimSpace(name)
		if name == "refs/heads/.invalid" {
			return "", fmt.Errorf("the repository at %s keeps its refs in a reftable, which diff capture does not read", repo.worktree)
		}
		if !strings.HasPrefix(name, "refs/") || strings.Contains(name, "..") {
			return "", fmt.Errorf("%s/HEAD names %q, which is not a ref", repo.gitDir, name)
		}
		b, err := sb.ReadFile(ctx, path.Join(repo.common, name))
		switch {
		case err == nil:
			ref = strings.TrimSpace(string(b))
			continue
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("reading ref %s: %w", name, err)
		}
		packed, err := sb.ReadFile(ctx, path.Join(repo.common, "packed-refs"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("reading %s/packed-refs: %w", repo.common, err)
		}
		for line := range strings.Lines(string(packed)) {
			if id, n, ok := strings.Cut(strings.TrimSpace(line), " "); ok && n == name && isObjectID(id) {
				return id, nil
			}
		}
		return "", nil // an unborn branch: no commits yet
	}
	return "", fmt.Errorf("%s/HEAD: symbolic refs nest too deep", repo.gitDir)
}

// isObjectID reports whether s is a SHA-1 or SHA-256 object id in hex.
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// makePrivateGitDir makes the capture's own git directory at dir: HEAD
// on an unborn branch, a minimal config (SHA-256 when the repository's ids
// are), the neutral info/attributes, an empty refs/ and objects/ whose
// alternate is the repository's object store. It is made by a command in
// the sandbox, so it belongs to the user git runs as, on every rung.
func makePrivateGitDir(ctx context.Context, sb Sandbox, dir string, repo repository, sha256 bool) error {
	config := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
	if sha256 {
		config = "[core]\n\trepositoryformatversion = 1\n\tbare = false\n[extensions]\n\tobjectformat = sha256\n"
	}
	// mkdir without -p: the directory is new, not one placed in advance.
	const script = `umask 077 && mkdir "$1" && mkdir -p "$1/info" "$1/refs/heads" "$1/objects/info" &&
printf 'ref: refs/heads/evalsi-diff\n' > "$1/HEAD" && printf '%s' "$2" > "$1/config" &&
printf '%s' "$3" > "$1/info/attributes" && printf '%s\n' "$4" > "$1/objects/info/alternates"`
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Argv:    []string{"/bin/sh", "-c", script, "sh", dir, config, neutralAttributes, path.Join(repo.common, "objects")},
		Env:     map[string]string{"PATH": systemPath, "LC_ALL": "C"},
		Timeout: gitTimeout,
	})
	switch {
	case err != nil:
		return fmt.Errorf("capturing the diff: making a private git directory in the sandbox: %w", err)
	case res.ExitCode != 0:
		return fmt.Errorf("capturing the diff: making a private git directory at %s in the sandbox exited %d: %s", dir, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}
