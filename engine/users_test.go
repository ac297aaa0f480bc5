package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"evals.si/agent"
	"evals.si/internal/testenv/benchimage"
	"evals.si/spec"
)

// userEnv is the local Debian image with a user "agent" (uid 1234) who
// owns the workdir, a file only root can read and one only root can write.
func userEnv(t *testing.T) *spec.Environment {
	return &spec.Environment{
		Image: benchimage.Ref(t, ".."),
		Setup: spec.Steps("useradd -m -u 1234 agent && mkdir -p /work && chown agent /work" +
			" && echo secret > /root-only && chmod 600 /root-only && echo orig > /etc/rootfile && chmod 644 /etc/rootfile"),
		Sandbox: &spec.SandboxPolicy{Workdir: "/work"},
		User:    "agent",
	}
}

// The agent's commands and its file tools run as environment.user: a
// non-root agent cannot write a root file or read a root-only one through
// write_file/read_file, while its own files work as before (missing and
// non-regular files keep their errors). The checker runs as checker.user,
// else environment.user; its files stay root's.
func TestAgentAndCheckerRunAsTheTasksUsers(t *testing.T) {
	envs := newEnvs(t)
	for _, tc := range []struct {
		name, checkerUser, wantChecker string
	}{
		{"checker as environment.user", "", "agent"},
		{"checker as checker.user", "root", "root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := userEnv(t)
			env.Checker = &spec.Checker{
				User:    tc.checkerUser,
				Files:   map[string]string{"/tmp/check-file": "from the checker"},
				Command: sh(`test "$(id -un)" = ` + tc.wantChecker + ` && grep -qx orig /etc/rootfile && test "$(stat -c %U /tmp/check-file)" = root`),
			}
			var problems []string
			r := newRunnerWith(t, envs, env, funcAgent(func(ctx context.Context, task agent.Task) error {
				sb := task.Sandbox
				check := func(what string, ok bool, detail any) {
					if !ok {
						problems = append(problems, fmt.Sprintf("%s: %v", what, detail))
					}
				}
				res, err := mustExec(ctx, task, "id -un")
				if err != nil {
					return err
				}
				check("commands run as agent", strings.TrimSpace(string(res.Stdout)) == "agent", string(res.Stdout))
				err = sb.WriteFile(ctx, "/etc/rootfile", []byte("pwned\n"), 0o644)
				check("writing a root file is refused", errors.Is(err, fs.ErrPermission), err)
				err = sb.WriteFile(ctx, "/etc/new-root-file", []byte("pwned\n"), 0o644)
				check("creating a file in a root directory is refused", errors.Is(err, fs.ErrPermission), err)
				_, err = sb.ReadFile(ctx, "/root-only")
				check("reading a root-only file is refused", errors.Is(err, fs.ErrPermission), err)
				err = sb.WriteFile(ctx, "sub/mine.sh", []byte("hello\n"), 0o750)
				check("writing its own file", err == nil, err)
				b, err := sb.ReadFile(ctx, "sub/mine.sh")
				check("reading it back", err == nil && string(b) == "hello\n", fmt.Sprintf("%q %v", b, err))
				res, err = mustExec(ctx, task, "stat -c '%U %a' sub/mine.sh")
				check("its file is its own, with the mode asked", err == nil && strings.TrimSpace(string(res.Stdout)) == "agent 750", fmt.Sprintf("%q %v", res.Stdout, err))
				_, err = sb.ReadFile(ctx, "missing")
				check("a missing file", errors.Is(err, fs.ErrNotExist), err)
				_, err = sb.ReadFile(ctx, "sub")
				check("a directory", err != nil && strings.Contains(err.Error(), "not a regular file"), err)
				return nil
			}))
			o, _, err := r.trial(t)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Error(p)
			}
			if o.Verdict == nil || !o.Verdict.Pass {
				t.Errorf("checker verdict %+v, want a pass as %s", o.Verdict, tc.wantChecker)
			}
		})
	}
	// A user the image does not have is an infrastructure error before
	// the agent runs, never a command run as someone else or a score.
	t.Run("unknown user", func(t *testing.T) {
		env := userEnv(t)
		env.User = "nobody-here"
		ran := false
		r := newRunnerWith(t, envs, env, funcAgent(func(context.Context, agent.Task) error { ran = true; return nil }))
		_, _, err := r.trial(t)
		if err == nil || ran || kindOf(err) != "sandbox" || !strings.Contains(err.Error(), `environment.user "nobody-here"`) {
			t.Fatalf("err = %v (kind %s, agent ran %v), want a sandbox error naming environment.user", err, kindOf(err), ran)
		}
	})
}
