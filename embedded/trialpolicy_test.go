package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"evals.si/internal/testenv/benchimage"
	"evals.si/internal/testenv/nethost"
	"evals.si/sandbox"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// policyListener is an HTTP server on the host's loopback that counts the
// requests it answered.
type policyListener struct {
	addr, body string
	hits       atomic.Int64
}

func newPolicyListener(t *testing.T, body string) *policyListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &policyListener{addr: ln.Addr().String(), body: body}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.hits.Add(1)
		io.WriteString(w, l.body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return l
}

// policyFetch is a bash command printing what an HTTP GET of addr returned
// through the sandbox's proxy settings, or the error.
func policyFetch(addr string) string {
	return fmt.Sprintf(`python3 -c "import urllib.request as u
try: print('GOT', u.urlopen('http://%s/', timeout=20).read().decode())
except Exception as e: print('FAILED', e)"`, addr)
}

// policyFetchViaProxy is policyFetch sent to the proxy even for a loopback
// address, which NO_PROXY otherwise keeps direct (the sandbox's own
// loopback): it shows what the proxy does with the engine's.
func policyFetchViaProxy(addr string) string {
	return "NO_PROXY= no_proxy= " + policyFetch(addr)
}

// escalate prefixes a call that is request_escalation for the network
// rather than a bash command.
const escalate = "@escalate "

// policyRun is a run of records that share one setup (the Debian image,
// calc.py, the checker) but not their policies, each record a scripted
// agent's bash calls.
type policyRecord struct {
	id    string
	env   map[string]any // metadata.environment
	calls []string
}

func runPolicySpec(t *testing.T, specEnv map[string]any, recs []policyRecord) (*App, map[string]*policyTrial) {
	t.Helper()
	records := []map[string]any{}
	script := map[string]any{}
	for _, r := range recs {
		rec := map[string]any{"id": r.id, "input": "task " + r.id}
		if r.env != nil {
			rec["metadata"] = map[string]any{"environment": r.env}
		}
		records = append(records, rec)
		var replies []map[string]any
		for i, c := range r.calls {
			call := map[string]any{"name": "bash", "arguments": map[string]any{"command": c}}
			if reason, ok := strings.CutPrefix(c, escalate); ok {
				call = map[string]any{"name": "request_escalation", "arguments": map[string]any{"kind": "network", "reason": reason}}
			}
			replies = append(replies, map[string]any{"content": fmt.Sprintf("step %d", i+1), "tool_calls": []map[string]any{call}})
		}
		script[r.id] = append(replies, map[string]any{"content": "done"})
	}
	s := map[string]any{
		"name": "trial-policy", "concurrency": len(recs), "retries": 0,
		"dataset":     map[string]any{"records": records},
		"target":      map[string]any{"connector": "scripted", "model": "scripted-agent", "script": map[string]any{"records": script}},
		"harness":     map[string]any{"builtin": map[string]any{"max_steps": 8, "escalation": map[string]any{"allow": []string{"network"}}}},
		"environment": specEnv,
		"evaluators":  []string{"task-success", "policy-violations"},
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "trial-policy.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f := loadSpec(t, p)
	a := openApp(t)
	sum, err := a.Run(context.Background(), f, RunOptions{})
	if err != nil {
		t.Fatalf("running the spec: %v", err)
	}
	return a, policyTrials(t, a, sum.RunID)
}

// writePolicySpec writes a spec of the given environment and records
// (inline, JSON) and loads it.
func writePolicySpec(t *testing.T, env map[string]any, records []map[string]any) *spec.File {
	t.Helper()
	s := map[string]any{
		"name": "loosen", "dataset": map[string]any{"records": records},
		"target":      map[string]any{"connector": "scripted", "model": "m", "script": map[string]any{"default": []map[string]any{{"content": "done"}}}},
		"harness":     map[string]any{"builtin": map[string]any{}},
		"environment": env,
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "loosen.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return loadSpec(t, p)
}

// policyTrial is what one finished trial left in the store.
type policyTrial struct {
	trial    store.Trial
	outputs  string
	policies []trajectory.Policy
	logs     []string
	verdict  *trajectory.Checker
	scores   map[string]float64
	report   sandbox.Report
}

func policyTrials(t *testing.T, a *App, runID string) map[string]*policyTrial {
	t.Helper()
	ctx := context.Background()
	trials, err := a.Store().ListTrials(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*policyTrial{}
	for _, tr := range trials {
		v := &policyTrial{trial: tr, scores: map[string]float64{}}
		evs, err := a.Store().Events(ctx, tr.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			switch {
			case e.Kind == trajectory.KindToolResult:
				v.outputs += e.ToolResult.Output + "\n"
			case e.Kind == trajectory.KindPolicy:
				v.policies = append(v.policies, *e.Policy)
			case e.Kind == trajectory.KindLog:
				v.logs = append(v.logs, e.Log.Text)
			case e.Kind == trajectory.KindChecker:
				v.verdict = e.Checker
			}
		}
		scores, err := a.Store().TrialScores(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scores {
			v.scores[s.Name] = s.Value
		}
		json.Unmarshal(tr.Isolation, &v.report)
		out[tr.RecordID] = v
	}
	return out
}

const policyChecker = "from calc import add\nassert add(2, 3) == 5, 'add is wrong'\nprint('ok')\n"

func policySpecEnv(ref string, sandbox map[string]any) map[string]any {
	sb := map[string]any{"workdir": "/workspace", "ladder": []string{"bwrap"}}
	for k, v := range sandbox {
		sb[k] = v
	}
	return map[string]any{
		"image":   ref,
		"files":   map[string]string{"calc.py": "def add(a, b):\n    return a - b\n"},
		"sandbox": sb,
		"checker": map[string]any{"files": map[string]string{"test_hidden.py": policyChecker}, "command": []string{"python3", "test_hidden.py"}, "timeout": "2m"},
	}
}

// Records that share their setup each run under their own policy: two
// concurrent allowlist trials, each through a proxy of its own, reach only
// their own host, and the other's refusal lands in their own trajectory;
// a deny record with memory_mb 256 reaches neither and cannot allocate
// 600 MB, though records before and beside it had no such limit.
func TestTrialPolicies(t *testing.T) {
	ref := benchimage.Ref(t, "..")
	hostA, hostB := newPolicyListener(t, "BODY-A"), newPolicyListener(t, "BODY-B")
	alloc := `python3 -c "b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096]); print('ALLOC' + 'ATED')" || echo ALLOC-FAILED`
	_, trials := runPolicySpec(t, policySpecEnv(ref, map[string]any{"network": "allowlist", "allow_hosts": []string{hostA.addr, hostB.addr}}), []policyRecord{
		{"net-a", map[string]any{"sandbox": map[string]any{"allow_hosts": []string{hostA.addr}}}, []string{policyFetch(hostA.addr), policyFetch(hostB.addr), alloc}},
		{"net-b", map[string]any{"sandbox": map[string]any{"allow_hosts": []string{hostB.addr}}}, []string{policyFetch(hostB.addr), policyFetch(hostA.addr)}},
		{"deny-256", map[string]any{"sandbox": map[string]any{"network": "deny", "allow_hosts": nil, "memory_mb": 256}}, []string{policyFetch(hostA.addr), policyFetch(hostB.addr), alloc}},
	})
	for _, id := range []string{"net-a", "net-b", "deny-256"} {
		if v := trials[id]; v == nil || v.trial.Status != store.TrialFinished {
			t.Fatalf("%s: %+v", id, v)
		}
	}
	for _, tc := range []struct{ id, own, other, ownHost, otherHost string }{
		{"net-a", "BODY-A", "BODY-B", hostA.addr, hostB.addr},
		{"net-b", "BODY-B", "BODY-A", hostB.addr, hostA.addr},
	} {
		v := trials[tc.id]
		if !strings.Contains(v.outputs, "GOT "+tc.own) || strings.Contains(v.outputs, "GOT "+tc.other) {
			t.Errorf("%s reached: %s; want only its own host", tc.id, v.outputs)
		}
		if v.report.Network != sandbox.NetworkAllowlist || v.report.ProxyAddr == "" {
			t.Errorf("%s report: network %q proxy %q", tc.id, v.report.Network, v.report.ProxyAddr)
		}
		refusedOther := false
		for _, p := range v.policies {
			if p.Host == tc.ownHost {
				t.Errorf("%s has a refusal of its own host: %+v", tc.id, p)
			}
			refusedOther = refusedOther || (p.Kind == "network" && p.Host == tc.otherHost)
		}
		if !refusedOther {
			t.Errorf("%s: no refusal of %s in its own trajectory: %+v", tc.id, tc.otherHost, v.policies)
		}
	}
	if a, b := trials["net-a"].report.ProxyAddr, trials["net-b"].report.ProxyAddr; a == b {
		t.Errorf("both trials went through the proxy at %s", a)
	}
	if !strings.Contains(trials["net-a"].outputs, "ALLOCATED") {
		t.Errorf("net-a (no memory limit) could not allocate 600 MB: %s", trials["net-a"].outputs)
	}
	d := trials["deny-256"]
	if strings.Contains(d.outputs, "GOT ") || !strings.Contains(d.outputs, "ALLOC-FAILED") || strings.Contains(d.outputs, "ALLOCATED") {
		t.Errorf("deny-256 reached a host or allocated 600 MB: %s", d.outputs)
	}
	if d.report.Network != sandbox.NetworkDeny || d.report.ProxyAddr != "" {
		t.Errorf("deny-256 report: network %q proxy %q", d.report.Network, d.report.ProxyAddr)
	}
	if hostA.hits.Load() != 1 || hostB.hits.Load() != 1 {
		t.Errorf("host A answered %d, host B %d requests; want one each", hostA.hits.Load(), hostB.hits.Load())
	}
}

// What an agent does to the checker's files or interpreter is its own
// failure: a directory or a symlink loop at the checker's file path, or
// python3 deleted (from the sandbox's copy of the image), each score
// task-success 0 with the reason, and the trial finishes rather than
// erroring. An agent that fixes the task still passes.
func TestAgentCannotTurnItsFailureIntoAnError(t *testing.T) {
	ref := benchimage.Ref(t, "..")
	fix := `printf 'def add(a, b):\n    return a + b\n' > calc.py`
	_, trials := runPolicySpec(t, policySpecEnv(ref, nil), []policyRecord{
		{"mkdir", nil, []string{"mkdir -p test_hidden.py/x && ls -ld test_hidden.py"}},
		{"symlink-loop", nil, []string{"ln -s loop test_hidden.py && ln -s test_hidden.py loop && ls -l"}},
		{"rm-python", nil, []string{fix, `for p in $(which -a python3) /usr/bin/python3*; do rm -f "$p"; done; python3 -V || echo PYTHON-GONE`}},
		{"fixed", nil, []string{fix}},
	})
	for _, tc := range []struct {
		id     string
		pass   bool
		reason string
	}{
		{"mkdir", false, "add is wrong"},
		{"symlink-loop", false, "add is wrong"},
		{"rm-python", false, "could not run after the agent"},
		{"fixed", true, ""},
	} {
		v := trials[tc.id]
		if v == nil {
			t.Errorf("%s: no trial", tc.id)
			continue
		}
		if v.trial.Status != store.TrialFinished {
			t.Errorf("%s: trial %s (%s: %s), want finished with a score", tc.id, v.trial.Status, v.trial.ErrorKind, v.trial.Error)
			continue
		}
		want := 0.0
		if tc.pass {
			want = 1
		}
		if got, ok := v.scores["task-success"]; !ok || got != want {
			t.Errorf("%s: task-success %v (present %v), want %v", tc.id, got, ok, want)
		}
		if v.verdict == nil || !strings.Contains(v.verdict.Output+v.verdict.Details, tc.reason) {
			t.Errorf("%s: verdict %+v, want the reason %q", tc.id, v.verdict, tc.reason)
		}
	}
	if !strings.Contains(trials["rm-python"].outputs, "PYTHON-GONE") {
		t.Errorf("rm-python did not remove python3: %s", trials["rm-python"].outputs)
	}
}

// A checker that cannot run on the untouched environment is an
// infrastructure error, found before any agent runs.
func TestCheckerThatCannotRunIsAnError(t *testing.T) {
	ref := benchimage.Ref(t, "..")
	env := policySpecEnv(ref, nil)
	env["checker"] = map[string]any{"command": []string{"python9", "test_hidden.py"}}
	_, trials := runPolicySpec(t, env, []policyRecord{{"r", nil, []string{"echo hi"}}})
	v := trials["r"]
	if v == nil || v.trial.Status == store.TrialFinished || v.trial.ErrorKind != "checker" || !strings.Contains(v.trial.Error, "untouched environment") {
		t.Fatalf("trial %+v, want a checker error found on the untouched environment", v)
	}
	if strings.Contains(v.outputs, "hi") {
		t.Errorf("the agent ran although the checker cannot: %s", v.outputs)
	}
}

// A record cannot loosen the spec file's policy: one asking for the host
// rung, allow_unsafe_host and network allow over a spec that says bwrap
// and deny refuses the run before any trial, naming record and field.
func TestRecordCannotLoosenTheSpecsPolicy(t *testing.T) {
	f := writePolicySpec(t, map[string]any{"sandbox": map[string]any{"ladder": []string{"bwrap"}}}, []map[string]any{
		{"id": "fine", "input": "x", "metadata": map[string]any{"environment": map[string]any{"sandbox": map[string]any{"memory_mb": 512}}}},
		{"id": "greedy", "input": "x", "metadata": map[string]any{"environment": map[string]any{"sandbox": map[string]any{
			"ladder": []string{"host"}, "allow_unsafe_host": true, "network": "allow"}}}},
	})
	a := openApp(t)
	_, err := a.Run(context.Background(), f, RunOptions{})
	var se SpecError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a SpecError (exit 2)", err)
	}
	for _, want := range []string{`record "greedy"`, "sandbox.network", "sandbox.ladder", "sandbox.allow_unsafe_host"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), `"fine"`) {
		t.Errorf("the tightening record was refused too: %v", err)
	}
	if runs, _ := a.Store().ListRuns(context.Background(), store.ListRunsOptions{}); len(runs) != 0 {
		t.Errorf("%d runs started", len(runs))
	}
}

// network: allow goes through an allow-all egress proxy of the trial's
// own: a host elsewhere is reached (and logged), the engine's loopback is
// not: directly, 127.0.0.1 is the sandbox's own (NO_PROXY keeps it
// direct), and through the proxy it is refused (a policy event). An
// escalation from deny to allow does the same for the rest of its trial.
func TestNetworkAllowGoesThroughTheProxy(t *testing.T) {
	ref := benchimage.Ref(t, "..")
	h := nethost.New(t)
	local := newPolicyListener(t, "LOOPBACK-BODY")
	_, trials := runPolicySpec(t, policySpecEnv(ref, map[string]any{"network": "allow"}), []policyRecord{
		{"allow", nil, []string{policyFetch(h.Addr), policyFetch(local.addr), policyFetchViaProxy(local.addr)}},
		{"escalated", map[string]any{"sandbox": map[string]any{"network": "deny"}}, []string{policyFetch(h.Addr), escalate + "need the test host", policyFetch(h.Addr), policyFetch(local.addr), policyFetchViaProxy(local.addr)}},
	})
	for _, id := range []string{"allow", "escalated"} {
		v := trials[id]
		if v == nil || v.trial.Status != store.TrialFinished {
			t.Fatalf("%s: %+v", id, v)
		}
		if n := strings.Count(v.outputs, "GOT "+h.Body); n != 1 {
			t.Errorf("%s reached the test host %d times, want once: %s", id, n, v.outputs)
		}
		if strings.Contains(v.outputs, "LOOPBACK-BODY") {
			t.Errorf("%s reached the engine's loopback: %s", id, v.outputs)
		}
		refused := false
		for _, p := range v.policies {
			refused = refused || (p.Kind == "network" && p.Host == local.addr)
		}
		if !refused {
			t.Errorf("%s: no policy event for the loopback attempt: %+v", id, v.policies)
		}
		logged := false
		for _, l := range v.logs {
			logged = logged || strings.Contains(l, h.Addr+" allowed")
		}
		if !logged {
			t.Errorf("%s: the allowed connection was not logged: %q", id, v.logs)
		}
	}
	if r := trials["allow"].report; r.Network != sandbox.NetworkAllow || r.ProxyAddr == "" {
		t.Errorf("allow report: network %q proxy %q", r.Network, r.ProxyAddr)
	}
	if local.hits.Load() != 0 {
		t.Errorf("the loopback listener answered %d requests", local.hits.Load())
	}
}
