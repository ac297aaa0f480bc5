// Command probe serves the conformance probe harness (harness/internal/probe)
// for the command form; die-run exits the process mid-run.
package main

import (
	"context"
	"log"
	"os"

	"evals.si/harness/internal/probe"
	"evals.si/harness/server"
)

func main() {
	h := &probe.Harness{Die: func() { os.Exit(3) }}
	if err := server.ServeEnv(context.Background(), h); err != nil {
		log.Fatal(err)
	}
}
