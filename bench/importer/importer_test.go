package importer

import (
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	for raw, want := range map[string]string{
		"harbor://tasks/x":       "/base/tasks/x",
		"harbor://.":             "/base",
		"harbor:///abs/dir":      "/abs/dir",
		"swebench://d/f.jsonl?a": "/base/d/f.jsonl",
	} {
		u, _ := url.Parse(raw)
		got, err := Path(u, "/base")
		if err != nil || got != filepath.FromSlash(want) {
			t.Errorf("Path(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
	u, _ := url.Parse("harbor://")
	if _, err := Path(u, "/base"); err == nil {
		t.Error("a URI without a path must be an error")
	}
}

func TestParseQuery(t *testing.T) {
	u, _ := url.Parse("x://d?tasks=a,%20b,,&image=oci-layout:/i&network=deny&oracle=true")
	q, err := ParseQuery(u, "tasks", "oracle")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(q.Names, []string{"a", "b"}) || q.Image != "oci-layout:/i" || q.Network != "deny" || q.Values.Get("oracle") != "true" {
		t.Errorf("%+v", q)
	}
	for _, raw := range []string{"x://d?bogus=1", "x://d?network=allow", "x://d?oracle=true"} {
		u, _ := url.Parse(raw)
		if _, err := ParseQuery(u, "tasks"); err == nil {
			t.Errorf("%s: no error", raw)
		}
	}
}

func TestSelect(t *testing.T) {
	all := []string{"a", "b", "c"}
	if got, _ := Select(all, nil); !reflect.DeepEqual(got, all) {
		t.Errorf("no filter: %v", got)
	}
	if got, _ := Select(all, []string{"c", "a"}); !reflect.DeepEqual(got, []string{"c", "a"}) {
		t.Errorf("filter: %v", got)
	}
	if _, err := Select(all, []string{"z"}); err == nil {
		t.Error("an unknown name must be an error")
	}
}

// TestTranslateOverImage: with image=REF the RUN steps are taken as done,
// while the steps that give placed files their modes and owners (and the
// WORKDIR directories) still run over the built image.
func TestTranslateOverImage(t *testing.T) {
	dir := t.TempDir()
	df := "FROM debian\nRUN useradd app\nWORKDIR /app\nCOPY --chown=app run.sh /app/\nUSER app\nRUN make\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("echo\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env, tr, err := Translate(filepath.Join(dir, "Dockerfile"), dir, Query{Image: "oci-layout:/built"})
	if err != nil {
		t.Fatal(err)
	}
	if env.Image != "oci-layout:/built" || tr.User != "app" || env.Files["/app/run.sh"] != "echo\n" {
		t.Errorf("image %q user %q files %v", env.Image, tr.User, env.Files)
	}
	var runs []string
	for _, s := range env.Setup {
		runs = append(runs, s.Run)
	}
	got := strings.Join(runs, "\n")
	for _, want := range []string{"chmod 755 /app/run.sh", "mkdir -p /app", `chown "$o" /app/run.sh`} {
		if !strings.Contains(got, want) {
			t.Errorf("setup lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"useradd", "make"} {
		if strings.Contains(got, not) {
			t.Errorf("setup runs %q over the built image:\n%s", not, got)
		}
	}
}
