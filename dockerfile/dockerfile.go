// Package dockerfile translates a Dockerfile into an Evals.si environment
// instead of building it: FROM becomes the image, RUN steps become the
// snapshotted setup (with WORKDIR, ENV, ARG, SHELL and USER applied to each
// step as Docker applies them), COPY and ADD of local files become
// environment files at absolute paths, the last WORKDIR becomes the
// workdir and the last USER the user. ENTRYPOINT, CMD and HEALTHCHECK are
// recorded as the image config Docker would write (Translation.Entrypoint,
// Cmd, Healthcheck); what runs them is the importer's choice.
//
// The Dockerfile is parsed with BuildKit's own parser and instruction
// decoder (github.com/moby/buildkit/frontend/dockerfile), and words are
// expanded with BuildKit's shell lexer, so quoting, line continuations,
// escape directives and ${VAR:-default} forms mean what they mean to
// docker build.
//
// What cannot be expressed as "an image plus setup commands" is refused
// with a *RefusalError saying why: multi-stage builds, COPY --from, remote
// ADD, RUN --mount (and other RUN flags), RUN heredocs, COPY
// --exclude/--parents, ADD --exclude/--checksum, non-octal --chmod, and
// symbolic links in the build context.
//
// USER u[:g] makes the RUN steps after it setup steps of that user, and
// the WORKDIRs created after it owned by it, as BuildKit does. COPY/ADD
// --chown=u[:g] is a root step at the instruction's place that chowns what
// the instruction placed, resolving u and g in the image's /etc/passwd and
// /etc/group at that point as BuildKit does (a name it cannot find is 0, a
// uid without a group is also the gid), so a user created by an earlier
// RUN owns its files.
//
// Binary files (not valid UTF-8, or holding NUL bytes) cannot travel in the
// environment's text files, so they are carried base64-encoded at
// PATH.evalsi-b64 and the first setup step decodes them in the sandbox
// (base64 -d, from coreutils) and removes the encoded copy. The same step
// restores executable bits, which environment files do not carry; files
// always stay writable by their owner (see EncodeFiles).
//
// Known differences from docker build, by design, reported in
// Translation.Notes when a Dockerfile meets them: every file is in place
// before the first RUN step (Docker places a COPY's files when it reaches
// the COPY); the base image's own config is not read while translating, so
// ${PATH} expands to Docker's default PATH, other variables it would set
// expand empty, RUN steps before the first WORKDIR run in /, and its
// ENTRYPOINT and CMD are unknown (Translation.BaseUnread lists what the
// Dockerfile leaves to it). Its ENV, WORKDIR and USER are applied when the
// environment is prepared: every command gets the ENV, the agent works in
// the WORKDIR the Dockerfile does not replace, and steps before the first
// USER run as the image's USER, as docker build runs them.
package dockerfile

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"evals.si/spec"
)

// DefaultPath is the PATH Docker gives a container whose image sets none;
// it stands in for the base image's PATH when a Dockerfile expands ${PATH}.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// B64Suffix marks a binary file carried base64-encoded.
const B64Suffix = ".evalsi-b64"

// Translation is a Dockerfile expressed as an environment.
type Translation struct {
	// Image is FROM's reference, with build arguments expanded.
	Image string
	// Platform is FROM --platform, if given (informational).
	Platform string
	// Env is the ENV in force at the end of the Dockerfile.
	Env map[string]string
	// Workdir is the last WORKDIR; empty when the Dockerfile sets none.
	Workdir string
	// Files maps absolute paths to text content (binary files are at
	// PATH.evalsi-b64, decoded by the first setup step).
	Files map[string]string
	// FileSetup is the command that decodes binary files and sets
	// permission bits (empty when none is needed); it is also Setup[0].
	FileSetup string
	// Setup are shell commands, run in order with /bin/sh -c, each as its
	// step's user (root when empty).
	Setup []spec.SetupStep
	// Placement is Setup without its RUN steps: what an image already
	// built from this Dockerfile needs when Files are placed over it again
	// (decoding, modes, WORKDIR directories, --chown, ADD's unpacking).
	Placement []spec.SetupStep
	// User is the last USER, as written after expansion (empty: none).
	User string
	// Entrypoint and Cmd are the image config's: exec form as written,
	// shell form as SHELL plus the command line. ENTRYPOINT resets a CMD
	// the base image set but not one this Dockerfile set (BuildKit's rule).
	Entrypoint []string
	Cmd        []string
	// EntrypointSet and CmdSet say the Dockerfile set them (an empty
	// exec form clears them); when unset the base image's stand.
	EntrypointSet, CmdSet bool
	// Healthcheck is HEALTHCHECK (nil when absent or NONE); a shell-form
	// test runs with the final SHELL, as the Docker daemon runs it.
	// Durations left zero mean Docker's defaults.
	Healthcheck *spec.Healthcheck
	// Notes say where the translation is honoured only in part for this
	// Dockerfile (see the package comment).
	Notes []string
	// BaseUnread lists the image config the Dockerfile leaves to its base
	// image that translating cannot apply: WORKDIR (for RUN steps before
	// the first WORKDIR), ENTRYPOINT, CMD.
	BaseUnread []string
}

// RefusalError says why a Dockerfile cannot be translated.
type RefusalError struct{ Reason string }

func (e *RefusalError) Error() string { return e.Reason }

func refuse(format string, args ...any) error {
	return &RefusalError{Reason: fmt.Sprintf(format, args...)}
}

// File is one file with its permission bits.
type File struct {
	Data []byte
	Mode fs.FileMode
}

// Translate translates the Dockerfile text df whose build context is
// contextDir; buildArgs override ARG defaults as --build-arg would.
func Translate(df []byte, contextDir string, buildArgs map[string]string) (*Translation, error) {
	res, err := parser.Parse(bytes.NewReader(df))
	if err != nil {
		return nil, fmt.Errorf("parsing Dockerfile: %w", err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, linter.New(&linter.Config{SkipAll: true}))
	if err != nil {
		return nil, fmt.Errorf("parsing Dockerfile: %w", err)
	}
	switch {
	case len(stages) == 0:
		return nil, errors.New("parsing Dockerfile: it has no FROM")
	case len(stages) > 1:
		return nil, refuse("multi-stage build (%d FROM instructions): only single-stage Dockerfiles translate to an image plus setup", len(stages))
	}
	t := &translator{
		lex:        shell.NewLex(res.EscapeToken),
		context:    contextDir,
		args:       map[string]string{},
		env:        newOrdered(),
		shell:      []string{"/bin/sh", "-c"},
		files:      map[string]File{},
		dirs:       map[string]bool{},
		baseVars:   map[string]bool{},
		workdirs:   map[string]bool{},
		placedDirs: map[string]int{},
	}
	// ARGs before FROM are in scope for FROM only; a bare ARG inside the
	// stage brings their value back in (Docker's rule).
	meta := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			v, given := buildArgs[kv.Key]
			if !given && kv.Value != nil {
				ex, err := t.expandWith(*kv.Value, mapEnv(meta))
				if err != nil {
					return nil, err
				}
				v, given = ex, true
			}
			if given {
				meta[kv.Key] = v
			}
		}
	}
	st := stages[0]
	img, err := t.expandWith(st.BaseName, mapEnv(meta))
	if err != nil {
		return nil, fmt.Errorf("expanding FROM %s: %w", st.BaseName, err)
	}
	if img == "" || strings.EqualFold(img, "scratch") {
		return nil, refuse("FROM %s: a task needs a base image with a shell", st.BaseName)
	}
	platform, _ := t.expandWith(st.Platform, mapEnv(meta))
	t.out = &Translation{Image: img, Platform: platform}

	for _, cmd := range st.Commands {
		t.seq++
		if loc := cmd.Location(); len(loc) > 0 {
			t.line = loc[0].Start.Line
		}
		if err := t.command(cmd, meta, buildArgs); err != nil {
			return nil, err
		}
	}
	return t.finish()
}

type translator struct {
	lex     *shell.Lex
	context string
	args    map[string]string // ARGs in scope (not persisted)
	env     *ordered          // ENV so far
	shell   []string
	workdir string
	files   map[string]File
	dirs    map[string]bool // empty directories to create
	// steps are the RUN (and WORKDIR mkdir, chown) steps, before the
	// final unset fix-up below.
	steps []step
	out   *Translation

	seq             int            // the instruction's index
	placedDirs      map[string]int // directories placing files creates, by the first COPY/ADD's seq
	line            int            // the instruction's line, for notes
	user            string         // USER so far
	runBefore       struct{ workdir bool }
	firstRun        int      // line of the first RUN (0: none yet)
	lateCopies      []string // COPY/ADD after the first RUN
	entrypoint, cmd []string
	epSet, cmdSet   bool
	health          []string // HEALTHCHECK's test, built in finish
	healthCfg       *spec.Healthcheck
	baseVars        map[string]bool // variables left to the base image
	workdirs        map[string]bool // directories WORKDIR created
}

// step is one setup command with the ENV and ARG state it runs under;
// a step with no workdir is a fix-up run as it is (as root).
type step struct {
	cmd     string
	env     []kv
	args    []kv
	workdir string
	user    string
	run     bool       // a RUN step, not a fix-up
	mkdir   *mkdirStep // a WORKDIR's directory, rendered in finish
}

// mkdirStep is a WORKDIR creating dir as user at instruction seq.
type mkdirStep struct {
	dir, user string
	seq       int
}

type kv struct{ k, v string }

func (t *translator) command(cmd instructions.Command, meta, buildArgs map[string]string) error {
	// Expand words the way BuildKit does: ARGs and ENV in scope, ENV
	// winning.
	if ex, ok := cmd.(instructions.SupportsSingleWordExpansion); ok {
		if _, isRun := cmd.(*instructions.RunCommand); !isRun {
			if err := ex.Expand(func(w string) (string, error) { return t.expand(w) }); err != nil {
				return fmt.Errorf("expanding %s: %w", cmd.Name(), err)
			}
		}
	}
	switch c := cmd.(type) {
	case *instructions.ArgCommand:
		for _, a := range c.Args {
			switch v, given := buildArgs[a.Key]; {
			case given:
				t.args[a.Key] = v
			case a.Value != nil:
				t.args[a.Key] = *a.Value
			default:
				if mv, ok := meta[a.Key]; ok {
					t.args[a.Key] = mv
				} else {
					t.args[a.Key] = ""
				}
			}
		}
	case *instructions.EnvCommand:
		for _, p := range c.Env {
			t.env.set(p.Key, p.Value)
		}
	case *instructions.WorkdirCommand:
		p := c.Path
		if !path.IsAbs(p) {
			p = path.Join(t.cwd(), p)
		}
		t.workdir = path.Clean(p)
		t.workdirs[t.workdir] = true
		// docker build creates the WORKDIR, owned by the USER in force;
		// the command is made in finish, which knows what later COPYs
		// place (and so create early) under it.
		t.steps = append(t.steps, step{mkdir: &mkdirStep{dir: t.workdir, user: t.user, seq: t.seq}})
	case *instructions.ShellCommand:
		t.shell = slices.Clone(c.Shell)
	case *instructions.UserCommand:
		if c.User == "" {
			return errors.New("USER with no user")
		}
		t.user = c.User
	case *instructions.RunCommand:
		return t.run(c)
	case *instructions.EntrypointCommand:
		t.entrypoint, t.epSet = t.cmdLine(c.ShellDependantCmdLine), true
		if !t.cmdSet {
			t.cmd = nil // the base image's CMD, not one set here
		}
	case *instructions.CmdCommand:
		t.cmd, t.cmdSet = t.cmdLine(c.ShellDependantCmdLine), true
	case *instructions.HealthCheckCommand:
		if err := t.healthcheck(c); err != nil {
			return err
		}
	case *instructions.CopyCommand:
		if c.From != "" {
			return refuse("COPY --from=%s copies from another stage or image, which needs a real build", c.From)
		}
		if len(c.ExcludePatterns) > 0 || c.Parents {
			return refuse("COPY --exclude/--parents is not translated")
		}
		return t.copy("COPY", c.SourcesAndDest, c.Chmod, c.Chown, false)
	case *instructions.AddCommand:
		if len(c.ExcludePatterns) > 0 || c.Checksum != "" {
			return refuse("ADD --exclude/--checksum is not translated")
		}
		for _, s := range c.SourcePaths {
			if isRemote(s) {
				return refuse("remote ADD %s: the build would download it, and downloads are not part of a translated environment", s)
			}
		}
		unpack := c.Unpack == nil || *c.Unpack
		return t.copy("ADD", c.SourcesAndDest, c.Chmod, c.Chown, unpack)
	case *instructions.OnbuildCommand:
		// Triggers run only in images built FROM this one.
	default:
		// EXPOSE, LABEL, VOLUME, STOPSIGNAL, MAINTAINER: metadata that
		// neither changes the filesystem nor says what runs.
	}
	return nil
}

// cmdLine is an ENTRYPOINT's or CMD's argv: exec form as written, shell
// form as the SHELL in force plus the command line.
func (t *translator) cmdLine(c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell {
		return append(slices.Clone(t.shell), strings.Join(c.CmdLine, " "))
	}
	return slices.Clone(c.CmdLine)
}

// healthcheck records HEALTHCHECK: NONE clears it (a base image's too).
func (t *translator) healthcheck(c *instructions.HealthCheckCommand) error {
	h := c.Health
	if h == nil || len(h.Test) == 0 || h.Test[0] == "NONE" {
		t.health, t.healthCfg = nil, nil
		return nil
	}
	switch h.Test[0] {
	case "CMD", "CMD-SHELL":
	default:
		return fmt.Errorf("HEALTHCHECK test %q: want CMD or CMD-SHELL", h.Test[0])
	}
	t.health = slices.Clone(h.Test)
	t.healthCfg = &spec.Healthcheck{
		Interval:      spec.Duration(h.Interval),
		Timeout:       spec.Duration(h.Timeout),
		StartPeriod:   spec.Duration(h.StartPeriod),
		StartInterval: spec.Duration(h.StartInterval),
		Retries:       h.Retries,
	}
	return nil
}

func (t *translator) cwd() string {
	if t.workdir == "" {
		return "/"
	}
	return t.workdir
}

func (t *translator) run(c *instructions.RunCommand) error {
	for _, f := range c.FlagsUsed {
		if f == "mount" {
			return refuse("RUN --mount: build-time mounts (caches, secrets, bind mounts of the context) have no counterpart in a translated setup")
		}
		return refuse("RUN --%s is not translated", f)
	}
	if len(c.Files) > 0 {
		return refuse("RUN with a heredoc is not translated")
	}
	var argv []string
	if c.PrependShell {
		argv = append(slices.Clone(t.shell), strings.Join(c.CmdLine, " "))
	} else {
		argv = slices.Clone(c.CmdLine)
	}
	if len(argv) == 0 {
		return errors.New("RUN with no command")
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	if t.firstRun == 0 {
		t.firstRun = t.line
		t.runBefore.workdir = t.workdir == ""
	}
	s := step{cmd: "exec " + strings.Join(q, " "), workdir: t.cwd(), env: t.env.list(), user: stepUser(t.user), run: true}
	for _, k := range sortedKeys(t.args) {
		s.args = append(s.args, kv{k, t.args[k]})
	}
	t.steps = append(t.steps, s)
	return nil
}

// expand expands a word with the ARGs and ENV in scope.
func (t *translator) expand(w string) (string, error) {
	m := map[string]string{}
	for k, v := range t.args {
		m[k] = v
	}
	for _, p := range t.env.list() {
		m[p.k] = p.v
	}
	_, ownPath := m["PATH"]
	if !ownPath {
		m["PATH"] = DefaultPath
	}
	if w == "" {
		return "", nil
	}
	res, err := t.lex.ProcessWordWithMatches(w, mapEnv(m))
	if err != nil {
		return "", err
	}
	// What the Dockerfile does not define, the base image might: note it.
	for k := range res.Unmatched {
		t.baseVars[k] = true
	}
	if _, used := res.Matched["PATH"]; used && !ownPath {
		t.baseVars["PATH"] = true
	}
	return res.Result, nil
}

func (t *translator) expandWith(w string, env mapEnv) (string, error) {
	if w == "" {
		return "", nil
	}
	out, _, err := t.lex.ProcessWord(w, env)
	return out, err
}

func isRemote(s string) bool {
	for _, p := range []string{"http://", "https://", "git@", "git://", "ssh://"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// copy places the sources of a COPY or ADD, and with --chown adds a root
// step here that chowns what it placed.
func (t *translator) copy(instr string, sd instructions.SourcesAndDest, chmod, chown string, unpack bool) error {
	if t.firstRun != 0 {
		t.lateCopies = append(t.lateCopies, fmt.Sprintf("%s at line %d", instr, t.line))
	}
	placed := &placement{}
	if err := t.place(instr, sd, chmod, unpack, placed); err != nil {
		return err
	}
	for _, p := range placed.paths {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := t.placedDirs[d]; !ok {
				t.placedDirs[d] = t.seq
			}
		}
	}
	if chown != "" && !isRoot(chown) {
		if len(placed.paths) > 0 {
			t.steps = append(t.steps, step{cmd: chownCmd(chown, placed.paths)})
		}
		if len(placed.archives) > 0 {
			// ADD --chown applies to what an archive unpacks too.
			t.steps = append(t.steps, step{cmd: chownCmd(chown, placed.archives, "-R")})
		}
	}
	return nil
}

// placement is what one COPY or ADD placed: files and directories it
// created, and directories it unpacked archives into.
type placement struct{ paths, archives []string }

func (t *translator) place(instr string, sd instructions.SourcesAndDest, chmod string, unpack bool, placed *placement) error {
	if len(sd.SourceContents) > 0 {
		// COPY <<EOF /path: inline files.
		for _, sc := range sd.SourceContents {
			dest := t.destFor(sd.DestPath, sc.Path, len(sd.SourceContents) > 1)
			t.files[dest] = File{Data: []byte(sc.Data), Mode: 0o644}
			placed.paths = append(placed.paths, dest)
		}
		return nil
	}
	if t.context == "" {
		return refuse("%s needs a build context, and this task has none", instr)
	}
	var srcs []string
	for _, s := range sd.SourcePaths {
		rel := path.Clean("/" + filepath.ToSlash(s))[1:] // the context is the root
		if strings.ContainsAny(rel, "*?[") {
			m, err := filepath.Glob(filepath.Join(t.context, filepath.FromSlash(rel)))
			if err != nil {
				return fmt.Errorf("%s %s: %w", instr, s, err)
			}
			if len(m) == 0 {
				return fmt.Errorf("%s %s: no file in the build context matches", instr, s)
			}
			srcs = append(srcs, m...)
			continue
		}
		srcs = append(srcs, filepath.Join(t.context, filepath.FromSlash(rel)))
	}
	multi := len(srcs) > 1
	var mode fs.FileMode
	if chmod != "" {
		var m uint32
		if _, err := fmt.Sscanf(chmod, "%o", &m); err != nil {
			return refuse("%s --chmod=%s: only octal modes are translated", instr, chmod)
		}
		mode = fs.FileMode(m)
	}
	for _, src := range srcs {
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("%s: %w", instr, err)
		}
		if fi.IsDir() {
			dest := sd.DestPath
			if !path.IsAbs(dest) {
				dest = path.Join(t.cwd(), dest)
			}
			if err := t.copyDir(src, path.Clean(dest), mode, placed); err != nil {
				return fmt.Errorf("%s %s: %w", instr, src, err)
			}
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("%s: %w", instr, err)
		}
		if unpack && isArchive(data) {
			dest := sd.DestPath
			if !path.IsAbs(dest) {
				dest = path.Join(t.cwd(), dest)
			}
			tmp := path.Join("/.evalsi-add", fmt.Sprintf("%d-%s", len(t.files), filepath.Base(src)))
			t.files[tmp] = File{Data: data, Mode: 0o644}
			t.steps = append(t.steps, step{cmd: fmt.Sprintf("mkdir -p %s && tar -xf %s -C %s && rm -f %s", Quote(dest), Quote(tmp), Quote(dest), Quote(tmp))})
			placed.archives = append(placed.archives, dest)
			continue
		}
		m := fi.Mode().Perm()
		if mode != 0 {
			m = mode
		}
		dest := t.destFor(sd.DestPath, filepath.Base(src), multi)
		t.files[dest] = File{Data: data, Mode: m}
		placed.paths = append(placed.paths, dest)
	}
	return nil
}

// destFor is where a single file named base goes: into the directory dest
// when dest ends in / or there are several sources, else at dest.
func (t *translator) destFor(dest, base string, multi bool) string {
	dir := strings.HasSuffix(dest, "/") || multi || dest == "." || dest == ""
	if !path.IsAbs(dest) {
		dest = path.Join(t.cwd(), dest)
	}
	if dir {
		return path.Join(dest, base)
	}
	return path.Clean(dest)
}

func (t *translator) copyDir(src, dest string, mode fs.FileMode, placed *placement) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dest, filepath.ToSlash(rel))
		if d.IsDir() {
			t.dirs[target] = true
			// The destination itself keeps its owner when a WORKDIR made
			// it; what the copy creates is the copy's.
			if target != dest || !t.workdirs[dest] {
				placed.paths = append(placed.paths, target)
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link, which is not translated", p)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m := fi.Mode().Perm()
		if mode != 0 {
			m = mode
		}
		t.files[target] = File{Data: data, Mode: m}
		placed.paths = append(placed.paths, target)
		return nil
	})
}

// isArchive reports a tar, gzip, bzip2 or xz archive, which ADD unpacks.
func isArchive(b []byte) bool {
	switch {
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}),
		bytes.HasPrefix(b, []byte("BZh")),
		bytes.HasPrefix(b, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return true
	case len(b) > 262 && string(b[257:262]) == "ustar":
		return true
	}
	return false
}

func (t *translator) finish() (*Translation, error) {
	out := t.out
	out.Workdir = t.workdir
	out.Env = map[string]string{}
	final := t.env.list()
	for _, p := range final {
		out.Env[p.k] = p.v
	}
	var files map[string]string
	var fix string
	files, fix = EncodeFiles(t.files)
	// Directories that COPY brought but that hold no file.
	var dirs []string
	for d := range t.dirs {
		empty := true
		for f := range t.files {
			if strings.HasPrefix(f, d+"/") {
				empty = false
				break
			}
		}
		if empty {
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	if len(dirs) > 0 {
		q := make([]string, len(dirs))
		for i, d := range dirs {
			q[i] = Quote(d)
		}
		fix = strings.TrimPrefix(fix+" && mkdir -p "+strings.Join(q, " "), " && ")
	}
	out.Files = files
	out.FileSetup = fix
	if fix != "" {
		out.Setup = append(out.Setup, spec.SetupStep{Run: fix})
		out.Placement = append(out.Placement, spec.SetupStep{Run: fix})
	}
	for _, s := range t.steps {
		if s.mkdir != nil {
			s.cmd = t.mkdirOwned(*s.mkdir)
		}
		st := spec.SetupStep{Run: s.render(final), User: s.user}
		out.Setup = append(out.Setup, st)
		if !s.run {
			out.Placement = append(out.Placement, st)
		}
	}
	out.User = t.user
	out.Entrypoint, out.EntrypointSet = t.entrypoint, t.epSet
	out.Cmd, out.CmdSet = t.cmd, t.cmdSet
	if t.healthCfg != nil {
		h := *t.healthCfg
		if t.health[0] == "CMD-SHELL" {
			// The daemon runs a shell-form test with the image's SHELL.
			h.Command = append(slices.Clone(t.shell), t.health[1])
		} else {
			h.Command = slices.Clone(t.health[1:])
		}
		out.Healthcheck = &h
	}
	t.notes()
	return out, nil
}

// notes records where this Dockerfile meets a known difference.
func (t *translator) notes() {
	out := t.out
	if len(t.lateCopies) > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%s: files are placed before the first RUN (line %d), not when docker build reaches them; a RUN that changes those paths before is run on the copied files", strings.Join(t.lateCopies, ", "), t.firstRun))
	}
	if len(t.baseVars) > 0 {
		names := sortedKeys(t.baseVars)
		out.Notes = append(out.Notes, fmt.Sprintf("${%s} not set by the Dockerfile: the base image's value is not read (PATH is Docker's default, others are empty)", strings.Join(names, "}, ${")))
	}
	if t.workdir == "" || t.runBefore.workdir {
		out.BaseUnread = append(out.BaseUnread, "WORKDIR")
	}
	if !t.epSet {
		out.BaseUnread = append(out.BaseUnread, "ENTRYPOINT")
	}
	if !t.epSet && !t.cmdSet {
		out.BaseUnread = append(out.BaseUnread, "CMD")
	}
}

// render writes a step as one sh -c command: the ENV and ARGs in force at
// that point exported, later ENV unset (the sandbox's environment holds
// the final ENV), then cd and exec.
func (s step) render(final []kv) string {
	if s.workdir == "" {
		return s.cmd
	}
	var b strings.Builder
	now := map[string]bool{}
	for _, p := range s.env {
		now[p.k] = true
	}
	for _, p := range s.args {
		if !now[p.k] {
			fmt.Fprintf(&b, "export %s=%s; ", p.k, Quote(p.v))
			now[p.k] = true
		}
	}
	for _, p := range s.env {
		fmt.Fprintf(&b, "export %s=%s; ", p.k, Quote(p.v))
	}
	for _, p := range final {
		if !now[p.k] {
			fmt.Fprintf(&b, "unset %s; ", p.k)
		}
	}
	fmt.Fprintf(&b, "cd %s && %s", Quote(s.workdir), s.cmd)
	return b.String()
}

// EncodeFiles turns files into environment files plus one shell command
// (empty when none is needed) that decodes the binary ones and sets
// permission bits that differ from 0644.
func EncodeFiles(files map[string]File) (map[string]string, string) {
	out := make(map[string]string, len(files))
	var cmds []string
	for _, p := range sortedKeys(files) {
		f := files[p]
		if IsText(f.Data) {
			out[p] = string(f.Data)
		} else {
			enc := p + B64Suffix
			out[enc] = base64.StdEncoding.EncodeToString(f.Data)
			cmds = append(cmds, fmt.Sprintf("base64 -d %s > %s && rm -f %s", Quote(enc), Quote(p), Quote(enc)))
		}
		// The owner keeps write permission: Docker's root writes read-only
		// files through CAP_DAC_OVERRIDE, which sandboxed root lacks, and a
		// task's solution or agent must be able to edit what COPY placed.
		if m := f.Mode.Perm() | 0o200; m != 0o644 {
			cmds = append(cmds, fmt.Sprintf("chmod %o %s", m, Quote(p)))
		}
	}
	return out, strings.Join(cmds, " && ")
}

// IsText reports whether b can travel as a text file: valid UTF-8 without
// NUL bytes.
func IsText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ordered is ENV in definition order (a redefinition keeps its place).
type ordered struct {
	keys []string
	vals map[string]string
}

func newOrdered() *ordered { return &ordered{vals: map[string]string{}} }

func (o *ordered) set(k, v string) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *ordered) list() []kv {
	out := make([]kv, len(o.keys))
	for i, k := range o.keys {
		out[i] = kv{k, o.vals[k]}
	}
	return out
}

// mapEnv is shell.EnvGetter over a map.
type mapEnv map[string]string

func (m mapEnv) Get(k string) (string, bool) { v, ok := m[k]; return v, ok }
func (m mapEnv) Keys() []string              { return sortedKeys(m) }
