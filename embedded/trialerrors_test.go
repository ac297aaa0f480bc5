package embedded

import (
	"context"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"evals.si/store"
	"evals.si/trajectory"
)

// TestTrialErrorsReadOnce runs trials that fail for real (a model server
// that refuses connections, in a plain run and in an agent run; a checker
// that cannot start; an image a loopback registry does not have) and
// checks the error each stores: its kind once, beside the message and
// not inside it, the image named once, the root cause at the end, and one
// kind (model) for a failed model call whichever runner made it.
func TestTrialErrorsReadOnce(t *testing.T) {
	t.Setenv("EVALSI_TRIALERRORS_KEY", "not-a-real-key")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String() // nothing listens here once closed
	ln.Close()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	regHost := strings.TrimPrefix(reg.URL, "http://")

	modelTarget := `target: {connector: openai, model: m, base_url: "http://` + refused + `/v1", max_retries: 0, api_key_env: EVALSI_TRIALERRORS_KEY}` + "\n"
	scriptedAgent := "target: {connector: scripted, model: m, script: {default: [{content: done}]}}\nharness: {builtin: {max_steps: 2}}\n"
	refusedCall := `openai chat completion for model "m" at http://` + refused + `/v1: Post "http://` + refused + `/v1/chat/completions": dial tcp ` + refused + `: connect: connection refused`
	for _, tc := range []struct {
		name    string
		sandbox bool
		spec    string
		kind    string
		err     string
	}{
		{"model refuses, plain run", false,
			modelTarget + "evaluators: [exact-match]\n",
			"model", refusedCall},
		{"model refuses, agent run", true,
			modelTarget + "harness: {builtin: {max_steps: 2}}\nenvironment: {sandbox: {network: deny, ladder: [bwrap]}}\n",
			"model", "step 1: " + refusedCall},
		{"checker cannot start", true,
			scriptedAgent + "environment:\n  sandbox: {network: deny, ladder: [bwrap]}\n  checker: {command: [/no/such/checker]}\n",
			"checker", `cannot run on the untouched environment, before any agent: the checker command ["/no/such/checker"] could not be started (exit 127: not found or not executable): is its interpreter installed in the image? output: evalsi: execvp /no/such/checker: fork/exec /no/such/checker: no such file or directory`},
		{"image not in the registry", true,
			scriptedAgent + "environment:\n  image: " + regHost + "/nope/python:3.13\n  sandbox: {network: deny, ladder: [bwrap]}\n",
			"image", "resolving image " + regHost + "/nope/python:3.13: fetching manifest: GET http://" + regHost + "/v2/nope/python/manifests/3.13: NAME_UNKNOWN: Unknown name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sandbox {
				requireAgentSandbox(t)
			}
			a := openApp(t)
			ctx := context.Background()
			f := writeSpec(t, "name: trial-errors\nretries: 0\ndataset: {records: [{id: a, input: x}]}\n"+tc.spec)
			sum, err := a.Run(ctx, f, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := sum.ErrorsByKind; len(got) != 1 || got[tc.kind] != 1 {
				t.Errorf("errors by kind %v, want one %s error", got, tc.kind)
			}
			trials, err := a.Store().ListTrials(ctx, sum.RunID)
			if err != nil || len(trials) != 1 {
				t.Fatalf("trials %v, %v", trials, err)
			}
			tr := trials[0]
			if tr.Status != store.TrialErrored || tr.ErrorKind != tc.kind || tr.Error != tc.err {
				t.Errorf("trial %s, kind %q, error\n%s\nwant errored, kind %q, error\n%s", tr.Status, tr.ErrorKind, tr.Error, tc.kind, tc.err)
			}
			// The trial's error event, which the viewer and OTel show,
			// says the same.
			events, err := a.Store().Events(ctx, tr.ID, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var last *trajectory.Error
			for _, e := range events {
				if e.Kind == trajectory.KindError {
					last = e.Error
				}
			}
			if last == nil || last.Kind != tc.kind || last.Message != tc.err {
				t.Errorf("last error event %+v, want kind %q with the trial's error", last, tc.kind)
			}
		})
	}
}
