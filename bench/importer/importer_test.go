package importer

import (
	"net/url"
	"path/filepath"
	"reflect"
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
