package kubetest

import (
	"testing"
	"time"
)

// WaitFor polls cond every 100 ms until it holds, failing the test after
// within (a bound on a hang, not a measure of speed) with the last error
// cond gave.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("waiting for %s: gave up after %s (last: %v)", what, within, last)
}
