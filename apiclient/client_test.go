package apiclient

import (
	"os"
	"path/filepath"
	"testing"
)

// TestToken: EVALSI_TOKEN wins; else the config file's entry for the
// server (with or without a trailing slash), else its token; else none.
func TestToken(t *testing.T) {
	cfgHome := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfgHome, "evalsi"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "token: tok-default\nservers:\n  \"http://a:8080\": {token: tok-a}\n"
	if err := os.WriteFile(filepath.Join(cfgHome, "evalsi", "config.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	for _, c := range []struct {
		name   string
		vars   map[string]string
		server string
		want   string
	}{
		{"variable wins", map[string]string{"EVALSI_TOKEN": "tok-env", "XDG_CONFIG_HOME": cfgHome}, "http://a:8080", "tok-env"},
		{"the server's entry", map[string]string{"XDG_CONFIG_HOME": cfgHome}, "http://a:8080", "tok-a"},
		{"trailing slash", map[string]string{"XDG_CONFIG_HOME": cfgHome}, "http://a:8080/", "tok-a"},
		{"another server: the default", map[string]string{"XDG_CONFIG_HOME": cfgHome}, "http://b:8080", "tok-default"},
		{"no config file", map[string]string{"XDG_CONFIG_HOME": t.TempDir()}, "http://a:8080", ""},
		{"no home at all", map[string]string{}, "http://a:8080", ""},
	} {
		got, err := Token(env(c.vars), c.server)
		if err != nil || got != c.want {
			t.Errorf("%s: Token = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if got := ConfigFile(env(map[string]string{"HOME": "/home/u"})); got != "/home/u/.config/evalsi/config.yaml" {
		t.Errorf("ConfigFile under HOME = %q", got)
	}
}

// TestNew refuses what is not an http(s) server URL and a missing token.
func TestNew(t *testing.T) {
	for _, c := range []struct{ base, token string }{
		{"evals:8080", "t"}, {"ftp://evals", "t"}, {"http://", "t"}, {"http://evals:8080", ""},
	} {
		if _, err := New(c.base, c.token); err == nil {
			t.Errorf("New(%q, %q) did not fail", c.base, c.token)
		}
	}
	c, err := New("https://evals:8080/", "t")
	if err != nil || c.Base() != "https://evals:8080" {
		t.Errorf("New: %v, base %q", err, c.Base())
	}
}
