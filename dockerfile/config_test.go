package dockerfile

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/spec"
)

// TestUser: RUN steps after USER run as that user (expanded as Docker
// expands it), the WORKDIR a non-root USER creates is chowned to it by a
// root step, and the last USER is the image's user.
func TestUser(t *testing.T) {
	df := `FROM debian
ARG NAME=agent
RUN useradd -m $NAME
USER ${NAME}:staff
RUN touch /tmp/a
WORKDIR /home/agent/work
USER root
RUN id
USER 1000
`
	tr, err := Translate([]byte(df), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr.User != "1000" {
		t.Errorf("user %q, want 1000", tr.User)
	}
	var users []string
	for _, s := range tr.Setup {
		users = append(users, s.User)
	}
	// useradd (root), touch (agent:staff), WORKDIR mkdir (root fix-up), id (root).
	if want := []string{"", "agent:staff", "", ""}; !slices.Equal(users, want) {
		t.Errorf("step users %q, want %q\n%s", users, want, strings.Join(runs(tr.Setup), "\n"))
	}
	mk := tr.Setup[2].Run
	for _, want := range []string{"mkdir -p /home/agent/work", `awk -F: -v n=agent`, "/etc/group", `chown -R "$o" "$top"`} {
		if !strings.Contains(mk, want) {
			t.Errorf("WORKDIR step %q lacks %q", mk, want)
		}
	}
	if slices.Contains(tr.BaseUnread, "USER") {
		// The base image's USER is the sandbox's user when the environment
		// is prepared: a RUN before the first USER runs as it.
		t.Errorf("base unread %q: USER is applied, not unread", tr.BaseUnread)
	}
}

// TestOwnerCmd: the chown target is resolved as BuildKit resolves
// --chown: a name from passwd (0:0 when absent), a number as uid and gid,
// a group name from /etc/group or a gid.
func TestOwnerCmd(t *testing.T) {
	cases := []struct{ spec, want string }{
		{"root", "o=0:0"},
		{"1000", "o=1000:1000"},
		{"1000:50", "o=1000:1000; o=${o%:*}:50"},
		{"app", `o=$(awk -F: -v n=app '$1==n{print $3":"$4; f=1; exit} END{if(!f)print "0:0"}' /etc/passwd)`},
		{"app:root", `o=$(awk -F: -v n=app '$1==n{print $3":"$4; f=1; exit} END{if(!f)print "0:0"}' /etc/passwd); o=${o%:*}:0`},
		{"1000:dev", `o=1000:1000; g=$(awk -F: -v n=dev '$1==n{print $3; exit}' /etc/group); if [ -n "$g" ]; then o=${o%:*}:$g; fi`},
		{"it's", `o=$(awk -F: -v n='it'\''s' '$1==n{print $3":"$4; f=1; exit} END{if(!f)print "0:0"}' /etc/passwd)`},
	}
	for _, c := range cases {
		if got := ownerCmd(c.spec); got != c.want {
			t.Errorf("ownerCmd(%q) =\n%s\nwant\n%s", c.spec, got, c.want)
		}
	}
}

// TestChown: COPY --chown places its files before the first RUN, as
// before, and a root step at the instruction's place (after the RUN that
// creates the user) chowns exactly what it placed.
func TestChown(t *testing.T) {
	ctx := writeContext(t, map[string]string{"src/a.py": "a", "src/sub/b.py": "b", "conf": "c"})
	df := `FROM debian
WORKDIR /app
RUN useradd app
COPY --chown=app:app src/ /app/
COPY conf /etc/conf
COPY --chown=0 conf /etc/conf0
RUN ls
`
	tr, err := Translate([]byte(df), ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := runs(tr.Setup)
	if len(got) != 4 {
		t.Fatalf("setup:\n%s", strings.Join(got, "\n"))
	}
	if !strings.HasSuffix(got[1], "useradd app'") {
		t.Errorf("step 1 %q, want useradd", got[1])
	}
	// /app itself was made by WORKDIR (root's); the copy's own entries are app's.
	if !strings.HasSuffix(got[2], `chown "$o" /app/a.py /app/sub /app/sub/b.py`) || !strings.Contains(got[2], "n=app") {
		t.Errorf("chown step %q", got[2])
	}
	if !strings.HasSuffix(got[3], "exec /bin/sh -c ls") {
		t.Errorf("last step %q", got[3])
	}
	if tr.Files["/app/sub/b.py"] != "b" || tr.Files["/etc/conf0"] != "c" {
		t.Errorf("files %v", tr.Files)
	}
	if len(tr.Notes) != 1 || !strings.Contains(tr.Notes[0], "COPY at line 4, COPY at line 5, COPY at line 6") {
		t.Errorf("notes %q: want the late COPYs named", tr.Notes)
	}
}

// TestEntrypointCmd is Docker's image config: exec form as written, shell
// form through the SHELL in force, later instructions replace earlier
// ones, and ENTRYPOINT resets only a CMD this Dockerfile did not set.
func TestEntrypointCmd(t *testing.T) {
	cases := []struct {
		name     string
		df       string
		ep, cmd  []string
		epSet    bool
		cmdSet   bool
		unreadEP bool
	}{
		{name: "none", df: "FROM x\n", unreadEP: true},
		{name: "exec forms", df: "FROM x\nENTRYPOINT [\"/entry.sh\", \"-v\"]\nCMD [\"serve\"]\n",
			ep: []string{"/entry.sh", "-v"}, cmd: []string{"serve"}, epSet: true, cmdSet: true},
		{name: "shell form uses SHELL", df: "FROM x\nSHELL [\"/bin/bash\", \"-c\"]\nENTRYPOINT exec python3 -m http.server  8000\n",
			ep: []string{"/bin/bash", "-c", "exec python3 -m http.server  8000"}, epSet: true},
		{name: "CMD before ENTRYPOINT kept", df: "FROM x\nCMD [\"a\"]\nENTRYPOINT [\"e\"]\n",
			ep: []string{"e"}, cmd: []string{"a"}, epSet: true, cmdSet: true},
		{name: "later replaces", df: "FROM x\nENTRYPOINT [\"e1\"]\nCMD c1\nENTRYPOINT [\"e2\"]\nCMD [\"c2\"]\n",
			ep: []string{"e2"}, cmd: []string{"c2"}, epSet: true, cmdSet: true},
		{name: "empty exec form clears", df: "FROM x\nENTRYPOINT []\n", ep: []string{}, epSet: true},
		{name: "CMD only", df: "FROM x\nCMD sleep 1\n", cmd: []string{"/bin/sh", "-c", "sleep 1"}, cmdSet: true, unreadEP: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := Translate([]byte(c.df), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tr.Entrypoint, c.ep) || !slices.Equal(tr.Cmd, c.cmd) || tr.EntrypointSet != c.epSet || tr.CmdSet != c.cmdSet {
				t.Errorf("entrypoint %q (set %v) cmd %q (set %v); want %q (%v) %q (%v)", tr.Entrypoint, tr.EntrypointSet, tr.Cmd, tr.CmdSet, c.ep, c.epSet, c.cmd, c.cmdSet)
			}
			if got := slices.Contains(tr.BaseUnread, "ENTRYPOINT"); got != c.unreadEP {
				t.Errorf("base unread %q", tr.BaseUnread)
			}
		})
	}
}

// TestHealthcheck records HEALTHCHECK as the daemon would run it.
func TestHealthcheck(t *testing.T) {
	cases := []struct {
		name string
		df   string
		want *spec.Healthcheck
	}{
		{"none", "FROM x\n", nil},
		{"NONE clears", "FROM x\nHEALTHCHECK CMD true\nHEALTHCHECK NONE\n", nil},
		{"exec form with options", "FROM x\nHEALTHCHECK --interval=2s --timeout=3s --start-period=4s --start-interval=1s --retries=5 CMD [\"curl\", \"-f\", \"http://localhost/\"]\n",
			&spec.Healthcheck{Command: []string{"curl", "-f", "http://localhost/"}, Interval: spec.Duration(2 * time.Second), Timeout: spec.Duration(3 * time.Second), StartPeriod: spec.Duration(4 * time.Second), StartInterval: spec.Duration(time.Second), Retries: 5}},
		{"shell form uses the final SHELL", "FROM x\nHEALTHCHECK CMD test -f /ready\nSHELL [\"/bin/bash\", \"-c\"]\n",
			&spec.Healthcheck{Command: []string{"/bin/bash", "-c", "test -f /ready"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := Translate([]byte(c.df), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tr.Healthcheck, c.want) {
				t.Errorf("healthcheck %+v, want %+v", tr.Healthcheck, c.want)
			}
		})
	}
}

// TestNotes: what a Dockerfile leaves to its base image, or where files
// are placed early, is reported; a self-contained one reports nothing.
func TestNotes(t *testing.T) {
	tr, err := Translate([]byte("FROM x\nENV PATH=/opt/bin:$PATH HOMEDIR=${HOME}/x\nWORKDIR /w\nUSER root\nRUN true\nENTRYPOINT []\nCMD []\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Notes) != 1 || !strings.Contains(tr.Notes[0], "${HOME}, ${PATH}") {
		t.Errorf("notes %q", tr.Notes)
	}
	if len(tr.BaseUnread) != 0 {
		t.Errorf("base unread %q, want none", tr.BaseUnread)
	}
	tr, err = Translate([]byte("FROM x\nRUN true\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"WORKDIR", "ENTRYPOINT", "CMD"}; !slices.Equal(tr.BaseUnread, want) || len(tr.Notes) != 0 {
		t.Errorf("base unread %q notes %q, want %q and none", tr.BaseUnread, tr.Notes, want)
	}
}
