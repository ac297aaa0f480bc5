package remote_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
)

// partialRung is the pool's real rung, whose sandboxes give out only the
// first live bytes of each stream through ExecRequest.Output, as a rung
// that streams less may: a prefix, the rest in the result.
type partialRung struct {
	sandbox.Rung
	live int
}

func (r partialRung) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Sandbox, error) {
	sb, err := r.Rung.Create(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return partialSandbox{sb, r.live}, nil
}

type partialSandbox struct {
	sandbox.Sandbox
	live int
}

func (s partialSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if out := req.Output; out != nil {
		var mu sync.Mutex
		var given [2]int
		req.Output = func(stderr bool, p []byte) {
			mu.Lock()
			defer mu.Unlock()
			i := 0
			if stderr {
				i = 1
			}
			p = p[:min(len(p), max(s.live-given[i], 0))]
			if len(p) > 0 {
				given[i] += len(p)
				out(stderr, p)
			}
		}
	}
	return s.Sandbox.Exec(ctx, req)
}

// TestPoolSendsWhatTheRungDidNotStream: whatever part of the output the
// pool's rung gave out live, the client gets each stream whole and once,
// with the live part first, and its own hook is given all of it in order.
func TestPoolSendsWhatTheRungDidNotStream(t *testing.T) {
	// Over the pool's 64 KiB frame, so the rest goes in several frames.
	const n = 200_000
	script := "head -c 200000 /dev/zero | tr '\\0' o; head -c 200000 /dev/zero | tr '\\0' e >&2"
	cases := []struct {
		name string
		live int
	}{
		{"nothing live", 0},
		{"a few bytes live", 7},
		{"more than a frame live", 100_000},
		{"all live", n},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := pooltest.Start(t, pooltest.Options{Rung: func(r sandbox.Rung) sandbox.Rung { return partialRung{r, tc.live} }})
			p := run.Dial(t, "stream-worker")
			sb, err := p.Rung().Create(t.Context(), sandbox.Config{Workdir: "/workspace", Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Close(context.Background()) })
			var mu sync.Mutex
			var got [2][]byte
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, Output: func(stderr bool, p []byte) {
				mu.Lock()
				defer mu.Unlock()
				i := 0
				if stderr {
					i = 1
				}
				got[i] = append(got[i], p...)
			}})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{strings.Repeat("o", n), strings.Repeat("e", n)} {
				stream := []string{"stdout", "stderr"}[i]
				if s := string([][]byte{res.Stdout, res.Stderr}[i]); s != want {
					t.Errorf("%s: %d bytes (%.20q…); want %d %q", stream, len(s), s, n, want[:1])
				}
				if string(got[i]) != want {
					t.Errorf("%s: the client's hook was given %d bytes; want all %d, as the pool sent them", stream, len(got[i]), n)
				}
			}
			if res.Truncated || res.ExitCode != 0 {
				t.Errorf("exit %d truncated %v; want 0, false", res.ExitCode, res.Truncated)
			}
		})
	}
}
