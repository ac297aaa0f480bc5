// Package reexec lets a binary re-execute itself as a small helper (the
// Landlock launcher, the in-sandbox network bridge). A helper is chosen by
// the EVALSI_REEXEC variable; Init runs it and never returns, so main (and
// TestMain in tests) must call Init before doing anything else.
package reexec

import (
	"fmt"
	"os"
	"sync"
)

// Env is the variable that names the helper to run.
const Env = "EVALSI_REEXEC"

var (
	mu      sync.Mutex
	helpers = map[string]func(args []string) int{}
)

// Register adds a helper; call it from an init function. The helper gets the
// process's arguments after argv[0] and returns the exit code.
func Register(name string, fn func(args []string) int) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := helpers[name]; dup {
		panic("reexec: helper registered twice: " + name)
	}
	helpers[name] = fn
}

// RegisterEarly adds a helper and, when this process was started as that
// helper, runs it at once and exits. Called from an init function, it runs
// the helper before Go initializes the packages ordered after the caller's,
// which in the engine binary is most of them (tens of milliseconds of
// package initialization a helper started per sandbox does not need).
// The helper may only use packages the caller imports: Go initializes
// those first.
func RegisterEarly(name string, fn func(args []string) int) {
	Register(name, fn)
	if os.Getenv(Env) == name {
		os.Unsetenv(Env)
		os.Exit(fn(os.Args[1:]))
	}
}

// Init runs the helper named by EVALSI_REEXEC, if any, and exits with its
// code. It returns only when the process is not a helper.
func Init() {
	name := os.Getenv(Env)
	if name == "" {
		return
	}
	mu.Lock()
	fn := helpers[name]
	mu.Unlock()
	if fn == nil {
		fmt.Fprintf(os.Stderr, "evalsi: unknown re-exec helper %q\n", name)
		os.Exit(127)
	}
	os.Unsetenv(Env)
	os.Exit(fn(os.Args[1:]))
}

// Self is the path of the running executable, for re-executing it.
func Self() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding own executable to re-exec: %w", err)
	}
	return p, nil
}
