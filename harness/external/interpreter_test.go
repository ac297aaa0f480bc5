package external

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInterpreter(t *testing.T) {
	root := t.TempDir()
	venv := func(base, name string) string {
		p := filepath.Join(base, "python", "adapters", name, ".venv", "bin", "python")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	checkout := filepath.Join(root, "checkout")
	inCheckout := venv(checkout, "bfcl")
	specDir := filepath.Join(checkout, "examples", "agents")
	if err := os.MkdirAll(specDir, 0o755); err != nil {
		t.Fatal(err)
	}
	installed := filepath.Join(root, "installed")
	byEnv := venv(installed, "bfcl")
	besideExe := venv(filepath.Join(root, "prefix"), "taubench")
	exe := func() (string, error) { return filepath.Join(root, "prefix", "bin", "evalsi"), nil }
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	for _, tc := range []struct {
		name, module, python, dir string
		getenv                    map[string]string
		want, wantErr             string
	}{
		{name: "explicit interpreter wins", module: "evalsi_bfcl", python: "/opt/py", want: "/opt/py"},
		{name: "shim example uses the system python", module: "evalsi_harness.examples.fixcalc", dir: specDir, want: "/usr/bin/python3"},
		{name: "user module uses the system python", module: "mine", dir: specDir, want: "/usr/bin/python3"},
		{name: "adapter found from the spec's directory upwards", module: "evalsi_bfcl", dir: specDir, want: inCheckout},
		{name: "adapter dir from the environment first", module: "evalsi_bfcl", dir: specDir,
			getenv: map[string]string{AdaptersEnv: filepath.Join(installed, "python", "adapters")}, want: byEnv},
		{name: "adapter beside the executable", module: "evalsi_taubench.harness", dir: specDir, want: besideExe},
		{name: "missing adapter says how to install it", module: "evalsi_nothere", dir: specDir, wantErr: "scripts/python-adapters.sh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "/usr/bin/python3" {
				if _, err := os.Stat(tc.want); err != nil {
					tc.want = "python3"
				}
			}
			o := Options{Python: tc.python, Dir: tc.dir, Getenv: env(tc.getenv), Executable: exe}
			got, err := interpreter(o, tc.module)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("interpreter = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("interpreter = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
