package remote_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/pool"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/sandbox/pool/wire"
)

// The pool's maxima bound what a client asks for: a sandbox over one is
// refused naming the limit, the value asked and the pool's maximum, and
// cgroup off is refused under maxima cgroups enforce; a sandbox that asks
// none gets the maximum, really (a fork past pids_max fails, a command
// asking an hour is killed at the maximum command timeout), and its
// isolation report says so. The hello tells clients the maxima.
func TestPoolBoundsSandboxLimits(t *testing.T) {
	maxl := wire.LimitValues{MemoryMB: 512, PidsMax: 24, FileSizeMB: 8, CommandTimeout: 5 * time.Second}
	run := pooltest.Start(t, pooltest.Options{Limits: pool.Limits{Max: maxl}})
	p := run.Dial(t, "bounded")
	ctx := t.Context()
	if m := p.Hello().Capabilities.MaxLimits; m == nil || *m != maxl {
		t.Errorf("hello's max limits %+v; want %+v", m, maxl)
	}

	for _, tc := range []struct {
		name string
		cfg  sandbox.Config
		says []string
	}{
		{"memory over", sandbox.Config{Limits: sandbox.Limits{MemoryMB: 4096}}, []string{"memory_mb 4096", "maximum of 512", "--max-memory-mb"}},
		{"pids over", sandbox.Config{Limits: sandbox.Limits{PidsMax: 10000}}, []string{"pids_max 10000", "maximum of 24", "--max-pids"}},
		{"file size over", sandbox.Config{Limits: sandbox.Limits{FileSizeMB: 9}}, []string{"file_size_mb 9", "maximum of 8"}},
		{"command timeout over", sandbox.Config{CommandTimeout: time.Hour}, []string{"command_timeout 1h0m0s", "maximum of 5s", "--max-command-timeout"}},
		{"cgroup off", sandbox.Config{Limits: sandbox.Limits{Cgroup: "off"}}, []string{"cgroup off", "memory_mb, pids_max", "cgroups"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Workdir = "/workspace"
			sb, err := p.Rung().Create(ctx, tc.cfg)
			if err == nil {
				sb.Close(context.Background())
				t.Fatalf("the pool made a sandbox of %+v", tc.cfg.Limits)
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal %q does not say %q", err, w)
				}
			}
		})
	}
	// And over HTTP the refusal is a 400, not a failure of the pool.
	cert := pooltest.Issue(t, run.ClientCA, "bounded-raw", false)
	if _, err := rawClient(run, &cert).do(http.MethodPost, wire.PathSandboxes, wire.CreateRequest{Workdir: "/w", Limits: wire.Limits{MemoryMB: 4096}}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("a create over the memory max: %v; want 400", err)
	}

	// A sandbox asking for nothing gets the maxima.
	sb, err := p.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	rep := sb.Report()
	limits, notes := strings.Join(rep.Limits, " "), strings.Join(rep.Notes, "\n")
	for _, w := range []string{"pids.max=24", "memory", "512MB", "rlimit-fsize=8MB", "timeout=5s"} {
		if !strings.Contains(limits, w) {
			t.Errorf("the report's limits %q do not show %q", rep.Limits, w)
		}
	}
	for _, w := range []string{"memory_mb=512: the sandbox pool's maximum", "pids_max=24", "command_timeout=5s"} {
		if !strings.Contains(notes, w) {
			t.Errorf("the report's notes do not say %q:\n%s", w, notes)
		}
	}
	// 100 background sleeps in one command: past 24 processes the forks
	// are refused, and the refusal is a pids denial.
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "n=0; for i in $(seq 100); do sleep 2 & n=$((n+1)); done; echo started $n"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Denials, func(d sandbox.Denial) bool { return d.Kind == "pids" }) {
		t.Errorf("100 processes under the pool's pids max of 24: exit %d, denials %+v, stdout %q, stderr %.300q; want a pids denial", res.ExitCode, res.Denials, res.Stdout, res.Stderr)
	}
	// A command asking for an hour is killed at the pool's 5s.
	start := time.Now()
	res, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "60"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); !res.TimedOut || took > 30*time.Second {
		t.Errorf("sleep 60 asking an hour under a 5s max: timed out %v after %s; want killed at 5s", res.TimedOut, took)
	}
}

// One client may have at most MaxRequests (default 32) requests in flight:
// with 32 commands running, its 33rd request is refused with 429 naming
// the cause, while another client is served and the busy client's
// keepalives still get through; once its commands end it is served again.
func TestPoolBoundsRequestsPerClient(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{})
	cert := pooltest.Issue(t, run.ClientCA, "busy", false)
	busy := run.DialCert(t, cert)
	ctx := t.Context()
	sb, err := busy.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	token := fmt.Sprintf("%d.%d", 60000+os.Getpid()%10000, time.Now().UnixNano()%1000)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range pool.DefaultMaxRequests {
		wg.Go(func() { sb.Exec(cctx, sandbox.ExecRequest{Argv: []string{"sleep", token}}) })
	}
	for deadline := time.Now().Add(60 * time.Second); len(procsWith(token)) < pool.DefaultMaxRequests; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d commands started", len(procsWith(token)), pool.DefaultMaxRequests)
		}
	}

	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "32 requests in flight") || !strings.Contains(err.Error(), "--max-requests") {
		t.Errorf("the 33rd exec: %v; want a refusal naming the 32 requests in flight", err)
	}
	r := rawClient(run, &cert)
	id := sb.(interface{ ID() string }).ID()
	b, err := r.do(http.MethodGet, wire.PathSandboxes+"/"+id+"/files?path=x", nil)
	var e wire.Error
	json.Unmarshal(b, &e)
	if err == nil || !strings.Contains(err.Error(), "429") || e.Code != wire.CodeBusy {
		t.Errorf("a file read past the limit: %v (code %q); want 429 with code %q", err, e.Code, wire.CodeBusy)
	}
	if gone := keepalive(t, r, id); len(gone) != 0 {
		t.Errorf("the busy client's keepalive: gone %v", gone)
	}
	other := run.Dial(t, "other")
	osb, err := other.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatalf("another client while one is at its limit: %v", err)
	}
	defer osb.Close(context.Background())
	if res, err := osb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "served"}}); err != nil || strings.TrimSpace(string(res.Stdout)) != "served" {
		t.Errorf("another client's exec while one is at its limit: %q, %v", res.Stdout, err)
	}

	// The client's Execs return when it cancels them; the pool's
	// handlers, which hold the requests, end once they have killed the
	// commands.
	cancel()
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
		if err == nil && res.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the busy client 30s after its commands were cancelled: %+v, %v (commands left: %v)", res, err, procsWith(token))
		}
	}
}

// Two CAs of the pool's client CA bundle, even of one name, that issue
// the same CN and serial are two clients: neither sees the other's
// sandbox. A second certificate of one CA with that CN and serial is the
// same client (the issuer is what tells the two apart).
func TestPoolIdentityIncludesIssuer(t *testing.T) {
	twin := pooltest.NewCA(t, "client-ca") // the name pooltest's own client CA has
	run := pooltest.Start(t, pooltest.Options{MoreClientCAs: []*pooltest.CA{twin}})
	sn := big.NewInt(0x5eed)
	certA := pooltest.IssueSerial(t, run.ClientCA, "worker", false, sn)
	certB := pooltest.IssueSerial(t, twin, "worker", false, sn)
	certA2 := pooltest.IssueSerial(t, run.ClientCA, "worker", false, sn)
	a, b := run.DialCert(t, certA), run.DialCert(t, certB)
	idA, idB := a.Hello().Identity, b.Hello().Identity
	for _, id := range []string{idA, idB} {
		if !strings.Contains(id, "CN=worker serial=5eed issuer=") {
			t.Errorf("identity %q; want CN, serial and issuer", id)
		}
	}
	if idA == idB {
		t.Fatalf("two CAs' certificates of one CN and serial are one identity: %s", idA)
	}
	ctx := t.Context()
	sb, err := a.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if err := sb.WriteFile(ctx, "a.txt", []byte("a's"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := sb.(interface{ ID() string }).ID()
	for _, tc := range []struct {
		name string
		cert tls.Certificate
		sees bool
	}{{"the other CA's twin", certB, false}, {"a second certificate of the same CA", certA2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rawClient(run, &tc.cert).do(http.MethodGet, wire.PathSandboxes+"/"+id+"/files?path=a.txt", nil)
			switch {
			case tc.sees && err != nil:
				t.Errorf("reading a's file: %v", err)
			case !tc.sees && (err == nil || !strings.Contains(err.Error(), "404")):
				t.Errorf("reading a's file: %v; want 404", err)
			}
		})
	}
}

// An upload's body has the pool's UploadTimeout to arrive: one that
// stalls is cut there, over HTTP/1.1 and HTTP/2, and writes nothing.
func TestPoolCutsStalledUpload(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{UploadTimeout: time.Second})
	cert := pooltest.Issue(t, run.ClientCA, "trickler", false)
	p := run.DialCert(t, cert)
	ctx := t.Context()
	sb, err := p.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	id := sb.(interface{ ID() string }).ID()
	for _, tc := range []struct {
		name  string
		http2 bool
	}{{"HTTP/1.1", false}, {"HTTP/2", true}} {
		t.Run(tc.name, func(t *testing.T) {
			name := "stalled-" + strings.ReplaceAll(tc.name, "/", "")
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: run.ClientTLS(&cert), ForceAttemptHTTP2: tc.http2}}
			pr, pw := io.Pipe()
			defer pw.Close()
			go pw.Write([]byte("the first bytes, then nothing"))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "https://"+run.Addr+wire.PathSandboxes+"/"+id+"/files?path="+name+"&mode=644", pr)
			req.ContentLength = 1 << 20
			start := time.Now()
			errc := make(chan error, 1)
			go func() {
				resp, err := c.Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 == 2 {
						err = errors.New("the pool took it: " + resp.Status)
					} else {
						t.Logf("the pool answered %s: %s", resp.Status, b)
					}
				}
				errc <- err
			}()
			select {
			case err := <-errc:
				if err != nil && strings.Contains(err.Error(), "the pool took it") {
					t.Fatal(err)
				}
				if took := time.Since(start); took > 20*time.Second {
					t.Errorf("the stalled upload ended after %s; want about the 1s upload timeout", took)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a stalled upload still holds its request after 30s, past the pool's 1s upload timeout")
			}
			if _, err := sb.ReadFile(ctx, name); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the stalled upload's file: %v; want none written", err)
			}
			if err := sb.WriteFile(ctx, "whole.txt", []byte("whole"), 0o644); err != nil {
				t.Errorf("a whole upload after the stalled one: %v", err)
			}
		})
	}
}
