package userns

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestMapLookupAndDescribe(t *testing.T) {
	m := IDMap{UID: []Mapping{{0, 1000, 1}, {1, 100000, 65535}}, GID: []Mapping{{0, 1000, 1}, {1, 200000, 65535}}}
	for _, c := range []struct {
		id, want int
		ok       bool
	}{{0, 1000, true}, {1, 100000, true}, {65535, 165534, true}, {65536, -1, false}} {
		if got, ok := m.HostUID(c.id); got != c.want || ok != c.ok {
			t.Errorf("HostUID(%d) = %d, %v; want %d, %v", c.id, got, ok, c.want, c.ok)
		}
	}
	if got, _ := m.HostGID(2); got != 200001 {
		t.Errorf("HostGID(2) = %d", got)
	}
	if got := m.Describe(); !slices.Equal(got, []string{"0-0 -> 1000-1000", "1-65535 -> 100000-165534"}) {
		t.Errorf("Describe = %q", got)
	}
	if !m.Full() {
		t.Errorf("a map of 0-65535 is full")
	}
	if (IDMap{UID: []Mapping{{0, 1000, 1}}, GID: []Mapping{{0, 1000, 1}}}).Full() {
		t.Errorf("a single-id map is not full")
	}
}

func TestSubordinate(t *testing.T) {
	f := filepath.Join(t.TempDir(), "subuid")
	os.WriteFile(f, []byte("alice:100000:65536\n# junk\nbad line\n1001:300000:1000\nroot:500000:0\n"), 0o644)
	for _, c := range []struct {
		name string
		uid  int
		want Mapping
		ok   bool
	}{
		{"alice", 1000, Mapping{0, 100000, 65536}, true},
		{"bob", 1001, Mapping{0, 300000, 1000}, true}, // by number
		{"root", 0, Mapping{}, false},                 // zero count
		{"carol", 1002, Mapping{}, false},
	} {
		got, err := subordinate(f, c.name, c.uid)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("subordinate(%s) = %+v, %v", c.name, got, err)
		}
	}
}

// ForEngine as root maps 0–65535 to a subordinate range; a non-root engine
// gets at least its own id as root.
func TestForEngine(t *testing.T) {
	m, note, err := ForEngine()
	if err != nil {
		t.Fatal(err)
	}
	if note == "" {
		t.Errorf("no note")
	}
	host, ok := m.HostUID(0)
	switch {
	case !ok:
		t.Errorf("root inside is not mapped: %+v", m)
	case os.Geteuid() == 0 && (host == 0 || !m.Full()):
		t.Errorf("engine root: root inside maps to %d (full %v), want an unprivileged range", host, m.Full())
	case os.Geteuid() != 0 && host != os.Geteuid():
		t.Errorf("non-root engine: root inside maps to %d, want %d", host, os.Geteuid())
	}
}
