package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// testRung is a rung whose probe result the test chooses; Select's logic is
// what is under test, not any real isolation.
type testRung struct {
	name  string
	level Level
	works bool
}

func (r testRung) Name() string     { return r.name }
func (r testRung) Isolation() Level { return r.level }
func (r testRung) Probe(context.Context) Probe {
	if r.works {
		return Probe{Works: true, Reason: "ok"}
	}
	return Probe{Reason: r.name + " is missing"}
}
func (r testRung) Create(context.Context, Config) (Sandbox, error) {
	return nil, errors.New("not used")
}

func TestSelect(t *testing.T) {
	fc := testRung{RungFirecracker, LevelVM, false}
	bw := testRung{RungBwrap, LevelNamespaced, true}
	bwBroken := testRung{RungBwrap, LevelNamespaced, false}
	ll := testRung{RungLandlock, LevelProcess, true}
	host := testRung{RungHost, LevelNone, true}
	cases := []struct {
		name      string
		available []Rung
		ladder    []string
		min       Level
		unsafe    bool
		want      string
		wantErr   []string
	}{
		{"default ladder picks the strongest working", []Rung{fc, bw, ll}, nil, LevelNone, false, RungBwrap, nil},
		{"falls to landlock", []Rung{fc, bwBroken, ll}, nil, LevelProcess, false, RungLandlock, nil},
		{"min refuses weaker rung, never downgrades", []Rung{fc, bwBroken, ll}, nil, LevelNamespaced, false, "",
			[]string{"firecracker is missing", "bwrap is missing", "below min_isolation namespaced"}},
		{"ladder order wins", []Rung{bw, ll}, []string{RungLandlock, RungBwrap}, LevelNone, false, RungLandlock, nil},
		{"host needs allow_unsafe_host", []Rung{host}, []string{RungHost}, LevelNone, false, "", []string{"allow_unsafe_host"}},
		{"host when allowed", []Rung{host}, []string{RungHost}, LevelNone, true, RungHost, nil},
		{"unknown rung is reported", []Rung{bw}, []string{"smolvm"}, LevelNone, false, "", []string{"smolvm", "no such rung"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, probes, err := Select(t.Context(), c.available, c.ladder, c.min, c.unsafe)
			if c.want != "" {
				if err != nil || r == nil || r.Name() != c.want {
					t.Fatalf("Select = %v, %v; want %s", r, err, c.want)
				}
				return
			}
			if !errors.Is(err, ErrNoRung) {
				t.Fatalf("Select err = %v; want ErrNoRung", err)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if len(probes) == 0 {
				t.Errorf("no probes returned")
			}
		})
	}
}

func TestDefaultLadderIsFresh(t *testing.T) {
	l := DefaultLadder()
	l[0] = "changed"
	if got := DefaultLadder(); !slices.Equal(got, []string{"firecracker", "bwrap", "landlock"}) {
		t.Errorf("DefaultLadder = %v", got)
	}
}

func TestProbeAll(t *testing.T) {
	ps := ProbeAll(t.Context(), []Rung{testRung{"a", LevelVM, false}, testRung{"b", LevelProcess, true}})
	if len(ps) != 2 || ps[0].Rung != "a" || ps[0].Works || ps[0].Isolation != LevelVM || !ps[1].Works {
		t.Errorf("ProbeAll = %+v", ps)
	}
}

func TestCommandEnv(t *testing.T) {
	env, err := CommandEnv(map[string]string{"A": "1", "B": "cfg"}, map[string]string{"B": "req"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "B=req", "PATH=" + DefaultPath}
	if !slices.Equal(env, want) {
		t.Errorf("CommandEnv = %v; want %v", env, want)
	}
	if _, err := CommandEnv(map[string]string{"A=B": "x"}, nil); err == nil {
		t.Errorf("a name with '=' must be refused")
	}
}

func TestInSandboxPath(t *testing.T) {
	for _, c := range [][3]string{
		{"/w", "a/b", "/w/a/b"}, {"/w", "/etc/x", "/etc/x"}, {"/w", "../x", "/x"}, {"/w", "", "/w"}, {"/w", "a/../../..", "/"},
	} {
		if got := InSandboxPath(c[0], c[1]); got != c[2] {
			t.Errorf("InSandboxPath(%q, %q) = %q; want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestCappedBuffer(t *testing.T) {
	b := NewCappedBuffer(5)
	b.Write([]byte("abc"))
	if n, err := b.Write([]byte("defgh")); n != 5 || err != nil {
		t.Errorf("Write = %d, %v; a capped buffer must accept everything", n, err)
	}
	if string(b.Bytes()) != "abcde" || !b.Truncated() {
		t.Errorf("got %q truncated=%v", b.Bytes(), b.Truncated())
	}
}
