package importer

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"evals.si/dockerfile"
	"evals.si/spec"
)

func TestInterpolate(t *testing.T) {
	vars := map[string]string{"A": "a", "EMPTY": ""}
	for in, want := range map[string]string{
		"${A}/$A/x":         "a/a/x",
		"${B:-def}":         "def",
		"${EMPTY:-def}":     "def",
		"${EMPTY-def}":      "",
		"${B-def}":          "def",
		"$$A and $${A}":     "$A and ${A}",
		"${NOPE} $NOPE.":    " .",
		"cost: 5$":          "cost: 5$",
		"${A:?must be set}": "a",
	} {
		lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
		if got := interpolate(in, lookup); got != want {
			t.Errorf("interpolate(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWords(t *testing.T) {
	cases := []struct {
		in   any
		want []string
		set  bool
	}{
		{nil, nil, false},
		{"sh -c 'sleep infinity'", []string{"sh", "-c", "sleep infinity"}, true},
		{`echo "a \"b\"" c\ d`, []string{"echo", `a "b"`, "c d"}, true},
		{[]any{"python3", "-m", "http.server", 8000}, []string{"python3", "-m", "http.server", "8000"}, true},
		{[]any{}, []string{}, true},
	}
	for _, c := range cases {
		got, set, err := Words(c.in)
		if err != nil || set != c.set || !slices.Equal(got, c.want) {
			t.Errorf("Words(%#v) = %q, %v, %v; want %q, %v", c.in, got, set, err, c.want, c.set)
		}
	}
	if _, _, err := Words("echo 'unterminated"); err == nil {
		t.Error("an unterminated quote must be an error")
	}
}

// TestMainProcess is Docker's rule for a container's argv: entrypoint
// (compose's, else the image's) then command (compose's, else the image's
// CMD, which a compose entrypoint resets).
func TestMainProcess(t *testing.T) {
	img := &dockerfile.Translation{Entrypoint: []string{"/e"}, EntrypointSet: true, Cmd: []string{"c"}, CmdSet: true}
	keep := []string{"sh", "-c", "sleep infinity"}
	cases := []struct {
		name       string
		tr         *dockerfile.Translation
		ep         []string
		epSet      bool
		cmd        []string
		cmdSet     bool
		want       []string
		known      bool
		hasService bool
	}{
		{"image entrypoint, compose keepalive", img, nil, false, keep, true, []string{"/e", "sh", "-c", "sleep infinity"}, true, true},
		{"image entrypoint and cmd", img, nil, false, nil, false, []string{"/e", "c"}, true, true},
		{"compose entrypoint resets CMD", img, []string{"/x"}, true, nil, false, []string{"/x"}, true, true},
		{"no entrypoint: keepalive only", &dockerfile.Translation{}, nil, false, keep, true, keep, false, false},
		{"cleared entrypoint", &dockerfile.Translation{EntrypointSet: true}, nil, false, keep, true, keep, true, false},
		{"prebuilt image", nil, nil, false, []string{"serve"}, true, []string{"serve"}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			argv, known := MainProcess(c.tr, c.ep, c.epSet, c.cmd, c.cmdSet)
			if !slices.Equal(argv, c.want) || known != c.known {
				t.Errorf("argv %q known %v, want %q %v", argv, known, c.want, c.known)
			}
			if got := Service(argv) != nil; got != c.hasService {
				t.Errorf("service %v, want %v", got, c.hasService)
			}
		})
	}
}

func TestComposeHealthcheck(t *testing.T) {
	cases := []struct {
		in   map[string]any
		want *spec.Healthcheck
	}{
		{nil, nil},
		{map[string]any{"test": "curl -f localhost", "interval": "2s", "retries": uint64(4)},
			&spec.Healthcheck{Command: []string{"/bin/sh", "-c", "curl -f localhost"}, Interval: spec.Duration(2 * time.Second), Retries: 4}},
		{map[string]any{"test": []any{"CMD", "true"}, "start_period": "1m"}, &spec.Healthcheck{Command: []string{"true"}, StartPeriod: spec.Duration(time.Minute)}},
		{map[string]any{"test": []any{"NONE"}}, nil},
		{map[string]any{"test": "x", "disable": true}, nil},
	}
	for _, c := range cases {
		got, err := ComposeHealthcheck(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ComposeHealthcheck(%v) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestSameUser(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"", "root", true}, {"0", "root:root", true}, {"app", "app", true}, {"app", "", false}, {"root:staff", "", false}, {"1000", "app", false}} {
		if got := SameUser(c.a, c.b); got != c.want {
			t.Errorf("SameUser(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

func TestLimits(t *testing.T) {
	var s ComposeService
	s.Deploy.Resources.Limits = map[string]any{"cpus": "0.5", "memory": "1g"}
	if cpus, mem, err := s.Limits(); err != nil || cpus != 0.5 || mem != 1024 {
		t.Errorf("limits %v %v %v", cpus, mem, err)
	}
	s.Deploy.Resources.Limits = map[string]any{"pids": 10}
	if _, _, err := s.Limits(); err == nil {
		t.Error("an unapplied limit must be an error")
	}
}
