// Command evalsi-sandbox is the bwrap rung's helper: the launcher, the exec
// server that is PID 1 of every bwrap sandbox, and the egress forwarder.
// The engine binary carries the same helpers; this one exists because a
// small binary starts several times faster, and one starts per sandbox.
// The rung uses it only when it sits next to the engine binary and comes
// from the same build (bwrap.DefaultHelper); it is not meant to be run by
// hand.
package main

import (
	"fmt"
	"os"

	"evals.si/sandbox/reexec"

	_ "evals.si/sandbox/bridge"
	_ "evals.si/sandbox/bwrap"
)

func main() {
	reexec.Init()
	fmt.Fprintln(os.Stderr, "evalsi-sandbox is started by the bwrap sandbox rung, not by hand")
	os.Exit(2)
}
