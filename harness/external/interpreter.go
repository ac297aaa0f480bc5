package external

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// AdaptersEnv names a directory holding the product's Python adapter
// environments (<dir>/<name>/.venv), for an installed evalsi that runs
// outside a checkout of this repository.
const AdaptersEnv = "EVALSI_PYTHON_ADAPTERS"

// adapterName is the adapter a python harness's module belongs to: the
// product's benchmark adapters are packages named evalsi_<adapter>
// (evalsi_bfcl, evalsi_taubench), each installed in an environment of its
// own because its official benchmark package pins its dependencies. The
// evalsi_harness shim and its examples need no adapter ("").
func adapterName(module string) string {
	top, _, _ := strings.Cut(module, ".")
	name, ok := strings.CutPrefix(top, "evalsi_")
	if !ok || name == "" || name == "harness" {
		return ""
	}
	return name
}

// interpreter picks the Python that runs the python form: Options.Python
// when set; for a product adapter's class the adapter's environment,
// python/adapters/<name>/.venv/bin/python, looked for under
// $EVALSI_PYTHON_ADAPTERS, next to the executable (bin/ of a checkout) and
// in the spec's directory and its parents; otherwise the distribution's
// /usr/bin/python3, which has python3-grpcio (a python3 earlier on PATH,
// from pyenv or a virtualenv, often has not).
func interpreter(o Options, module string) (string, error) {
	if o.Python != "" {
		return o.Python, nil
	}
	if name := adapterName(module); name != "" {
		var looked []string
		for _, c := range adapterCandidates(o, name) {
			if fi, err := os.Stat(c); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return c, nil
			}
			looked = append(looked, c)
		}
		return "", fmt.Errorf("the %s adapter's Python environment is not installed: run scripts/python-adapters.sh in a checkout of Evals.si (or set %s to a directory holding %s/.venv); looked for %s",
			name, AdaptersEnv, name, strings.Join(looked, ", "))
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3", nil
	}
	return "python3", nil
}

func adapterCandidates(o Options, name string) []string {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	venv := filepath.Join(name, ".venv", "bin", "python")
	var out []string
	if d := getenv(AdaptersEnv); d != "" {
		out = append(out, filepath.Join(d, venv))
	}
	rel := filepath.Join("python", "adapters", venv)
	executable := o.Executable
	if executable == nil {
		executable = os.Executable
	}
	if exe, err := executable(); err == nil {
		out = append(out, filepath.Join(filepath.Dir(filepath.Dir(exe)), rel))
	}
	if dir, err := filepath.Abs(o.Dir); err == nil && o.Dir != "" {
		// A spec in examples/agents/ of a checkout: the repository is a
		// few directories up.
		for i := 0; i < 6; i++ {
			out = append(out, filepath.Join(dir, rel))
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return out
}
