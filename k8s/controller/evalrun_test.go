package controller_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"evals.si/internal/testenv/kubetest"
	"evals.si/k8s/apis/v1alpha1"
	"evals.si/k8s/controller"
	"evals.si/spec"
)

// tinyRun needs no model server and no sandbox: a scripted target and an
// exact-match evaluator.
const tinyRun = `dataset:
  records:
    - {id: a, input: hi, expected: hello}
    - {id: b, input: ho, expected: nope}
target:
  connector: scripted
  model: m
  script:
    default:
      - content: hello
evaluators: [exact-match]
`

// envelope wraps a run file in an EvalRun named name that submits to
// server with the token in Secret evalsi-token.
func envelope(name, server, run string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: evals.si/v1alpha1\nkind: EvalRun\nmetadata:\n  name: %s\nspec:\n", name)
	fmt.Fprintf(&b, "  evalsi:\n    server: %s\n    project: k8s\n    tokenSecretRef: {name: evalsi-token, key: token}\n", server)
	for _, l := range strings.SplitAfter(run, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString("  ")
		}
		b.WriteString(l)
	}
	return b.String()
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "evalrun.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func fixCalc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "agents", "fix-calc-offline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func tokenSecret(t *testing.T, cl client.Client, ns, token string) {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "evalsi-token", Namespace: ns}, Data: map[string][]byte{"token": []byte(token)}}
	if err := cl.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
}

func getRun(t *testing.T, cl client.Client, ns, name string) *v1alpha1.EvalRun {
	t.Helper()
	var er v1alpha1.EvalRun
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &er); err != nil {
		t.Fatal(err)
	}
	return &er
}

func waitPhase(t *testing.T, cl client.Client, ns, name string, phases ...v1alpha1.Phase) *v1alpha1.EvalRun {
	t.Helper()
	var er v1alpha1.EvalRun
	waitFor(t, fmt.Sprintf("EvalRun %s to reach %v", name, phases), func() (bool, error) {
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &er); err != nil {
			return false, err
		}
		for _, p := range phases {
			if er.Status.Phase == p {
				return true, nil
			}
		}
		return false, fmt.Errorf("phase %q, conditions %+v", er.Status.Phase, er.Status.Conditions)
	})
	return &er
}

// kubectl runs kubectl and returns its output and error, for the calls
// expected to fail.
func kubectl(c *kubetest.Cluster, args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// The CRDs install; fix-calc-offline wrapped in the envelope applies with
// kubectl (the same file `evalsi run -f` loads); the schema refuses
// objects that are not EvalRuns.
func TestCRDAcceptsRunFileAndRefusesBadObjects(t *testing.T) {
	c, cl, ns := cluster(t)
	doc := envelope("fix-calc", "http://127.0.0.1:1", fixCalc(t))
	path := writeFile(t, doc)
	if f, err := spec.Load(path); err != nil || f.Validate() != nil {
		t.Fatalf("evalsi run -f does not take the EvalRun file: %v", err)
	}
	c.Kubectl(t, "apply", "-n", ns, "-f", path)
	er := getRun(t, cl, ns, "fix-calc")
	f, err := controller.LoadSpec(er)
	if err != nil {
		t.Fatalf("the stored EvalRun's spec does not load: %v", err)
	}
	if f.Spec.Name != "fix-calc-offline" || f.Spec.Environment == nil || len(f.Spec.Evaluators) != 4 {
		t.Errorf("stored spec = %+v", f.Spec)
	}

	bad := []struct{ name, doc, want string }{
		{"trials not an integer", strings.Replace(envelope("bad1", "http://127.0.0.1:1", tinyRun), "evaluators:", "trials: three\n  evaluators:", 1), "trials"},
		{"no evalsi block", strings.Replace(envelope("bad2", "http://127.0.0.1:1", tinyRun), "  evalsi:\n    server: http://127.0.0.1:1\n    project: k8s\n    tokenSecretRef: {name: evalsi-token, key: token}\n", "", 1), "evalsi"},
		{"misspelt top-level key", strings.Replace(envelope("bad3", "http://127.0.0.1:1", tinyRun), "  evaluators:", "  evaluatorz:", 1), "evaluatorz"},
		{"server not a URL", envelope("bad4", "ftp://x", tinyRun), "server"},
		{"target not a mapping", strings.Replace(envelope("bad5", "http://127.0.0.1:1", tinyRun), "  target:\n", "  target: 3\n  harness:\n", 1), "target"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			out, err := kubectl(c, "apply", "-n", ns, "-f", writeFile(t, b.doc))
			if err == nil {
				t.Fatalf("kubectl apply took it:\n%s", out)
			}
			if !strings.Contains(out, b.want) {
				t.Errorf("the refusal does not name %q:\n%s", b.want, out)
			}
		})
	}
}

// fix-calc-offline applied with kubectl runs to completion on a real
// server and worker; the status has the server's run id, counts that
// match the server's trials and the summary's scores. The operator is
// restarted while the run is in progress, and the server still has one run.
func TestEvalRunSucceedsAndIsSubmittedOnce(t *testing.T) {
	c, cl, ns := cluster(t)
	srv := startServer(t, true)
	tokenSecret(t, cl, ns, srv.Token)
	op := startOperator(t, c, ns)
	c.Kubectl(t, "apply", "-n", ns, "-f", writeFile(t, envelope("fix-calc", srv.URL, fixCalc(t))))

	var er v1alpha1.EvalRun
	waitFor(t, "the run id in status", func() (bool, error) {
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "fix-calc"}, &er)
		return err == nil && er.Status.RunID != "", err
	})
	op.stop()
	startOperator(t, c, ns)
	done := waitPhase(t, cl, ns, "fix-calc", v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	if done.Status.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("phase %s: %+v", done.Status.Phase, done.Status)
	}
	if done.Status.RunID != er.Status.RunID {
		t.Errorf("run id changed across the restart: %s then %s", er.Status.RunID, done.Status.RunID)
	}
	ctx := context.Background()
	trials, err := srv.client.Trials(ctx, done.Status.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if want := controller.Count(trials.Trials); done.Status.Trials != want || want.Total != 1 || want.Passed != 1 {
		t.Errorf("status counts %+v, server's %+v (want 1 trial, passed)", done.Status.Trials, want)
	}
	if s := done.Status.Summary; s == nil || s.Scores["task-success"] != "1" || s.Status != "completed" {
		t.Errorf("summary %+v", done.Status.Summary)
	}
	if cond := meta.FindStatusCondition(done.Status.Conditions, v1alpha1.ConditionComplete); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Complete condition %+v", cond)
	}
	if n := runsNamed(t, srv, "fix-calc-offline"); n != 1 {
		t.Errorf("the server has %d runs of fix-calc-offline, want 1", n)
	}
	for _, c := range done.Status.Conditions {
		if strings.Contains(c.Message, srv.Token) {
			t.Errorf("condition %s holds the token", c.Type)
		}
	}
}

func runsNamed(t *testing.T, srv *evalServer, name string) int {
	t.Helper()
	list, err := srv.client.Runs(context.Background(), 100, "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range list.Runs {
		if r.Name == name {
			n++
		}
	}
	return n
}

// An operator that died between recording a submission and recording the
// run id finds the run on the server instead of submitting another.
func TestEvalRunAdoptsTheRunAnEarlierSubmitMade(t *testing.T) {
	c, cl, ns := cluster(t)
	srv := startServer(t, true)
	tokenSecret(t, cl, ns, srv.Token)
	ctx := context.Background()
	c.Kubectl(t, "apply", "-n", ns, "-f", writeFile(t, envelope("adopt-me", srv.URL, tinyRun)))
	er := getRun(t, cl, ns, "adopt-me")
	f, err := controller.LoadSpec(er)
	if err != nil {
		t.Fatal(err)
	}
	er.Status.Phase = v1alpha1.PhasePending
	er.Status.Submission = &v1alpha1.Submission{RunName: f.Spec.Name, Project: "k8s", Started: metav1.Now()}
	if err := cl.Status().Update(ctx, er); err != nil {
		t.Fatal(err)
	}
	run, err := srv.client.Submit(ctx, "adopt-me.yaml", f.Spec, "k8s")
	if err != nil {
		t.Fatal(err)
	}
	startOperator(t, c, ns)
	done := waitPhase(t, cl, ns, "adopt-me", v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	if done.Status.RunID != run.ID {
		t.Errorf("run id %q, want the one already submitted, %s", done.Status.RunID, run.ID)
	}
	if n := runsNamed(t, srv, "adopt-me"); n != 1 {
		t.Errorf("the server has %d runs of adopt-me, want 1", n)
	}
	if done.Status.Trials.Total != 2 || done.Status.Trials.Passed != 1 || done.Status.Trials.Failed != 1 {
		t.Errorf("counts %+v, want 2 trials, 1 passed, 1 failed", done.Status.Trials)
	}
}

// A spec the run file's loader or validation refuses gets Invalid with the
// field at fault, and nothing reaches the server; so do inline records
// over the bound. Fixing the spec submits it.
func TestEvalRunInvalid(t *testing.T) {
	c, cl, ns := cluster(t)
	srv := startServer(t, false)
	tokenSecret(t, cl, ns, srv.Token)
	startOperator(t, c, ns)
	var big strings.Builder
	big.WriteString("dataset:\n  records:\n")
	for i := range 700 {
		fmt.Fprintf(&big, "    - {id: r%d, input: %q}\n", i, strings.Repeat("x", 1000))
	}
	big.WriteString("target: {connector: scripted, model: m, script: {default: [{content: hi}]}}\nevaluators: [exact-match]\n")
	cases := []struct{ name, run, want string }{
		{"misspelt", strings.Replace(tinyRun, "  script:", "  scirpt:", 1), `spec.target: unknown field "scirpt" in target; did you mean "script"?`},
		{"unknown-evaluator", strings.Replace(tinyRun, "[exact-match]", "[no-such-evaluator]", 1), "no-such-evaluator"},
		{"big", big.String(), "datasets_dir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// create, not apply: apply keeps a copy of the object in an
			// annotation, which a big object overflows.
			c.Kubectl(t, "create", "-n", ns, "-f", writeFile(t, envelope(tc.name, srv.URL, tc.run)))
			er := waitPhase(t, cl, ns, tc.name, v1alpha1.PhaseInvalid, v1alpha1.PhaseSubmitted, v1alpha1.PhaseRunning)
			cond := meta.FindStatusCondition(er.Status.Conditions, v1alpha1.ConditionInvalid)
			if er.Status.Phase != v1alpha1.PhaseInvalid || cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, tc.want) {
				t.Fatalf("phase %s, Invalid condition %+v; want a message with %q", er.Status.Phase, cond, tc.want)
			}
			if er.Status.RunID != "" || er.Status.Submission != nil {
				t.Errorf("an invalid spec was submitted: %+v", er.Status)
			}
		})
	}
	if list, err := srv.client.Runs(context.Background(), 10, ""); err != nil || len(list.Runs) != 0 {
		t.Fatalf("the server has runs %+v (%v), want none", list.Runs, err)
	}
	// The fix is a new generation, validated again and submitted.
	// replace: the object was made with create, so apply would merge and
	// keep the misspelt key.
	c.Kubectl(t, "replace", "-n", ns, "-f", writeFile(t, envelope("misspelt", srv.URL, tinyRun)))
	er := waitPhase(t, cl, ns, "misspelt", v1alpha1.PhaseSubmitted, v1alpha1.PhaseRunning)
	if cond := meta.FindStatusCondition(er.Status.Conditions, v1alpha1.ConditionInvalid); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("Invalid condition after the fix: %+v", cond)
	}
}

// The EvalRun adopts its run's pods; deleting an EvalRun whose run is in
// progress (no worker takes its trials) asks the server to cancel the run,
// lets the object go, and the pods go with it.
func TestEvalRunDeletionCancels(t *testing.T) {
	c, cl, ns := cluster(t)
	srv := startServer(t, false)
	tokenSecret(t, cl, ns, srv.Token)
	startOperator(t, c, ns)
	c.Kubectl(t, "apply", "-n", ns, "-f", writeFile(t, envelope("doomed", srv.URL, tinyRun)))
	er := waitPhase(t, cl, ns, "doomed", v1alpha1.PhaseSubmitted, v1alpha1.PhaseRunning)
	if !strings.Contains(strings.Join(er.Finalizers, ","), controller.Finalizer) {
		t.Fatalf("finalizers %v", er.Finalizers)
	}
	// A pod of the run (the pod rung labels its sandboxes) gets the
	// EvalRun as an owner, and goes with it.
	no := false
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-1", Namespace: ns, Labels: map[string]string{controller.RunLabel: er.Status.RunID}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "evalsi.test/none:1"}}}}
	waitFor(t, "the pod to be created (the namespace's default service account first)", func() (bool, error) {
		err := cl.Create(context.Background(), pod)
		return err == nil, err
	})
	waitFor(t, "the EvalRun to adopt the run's pod", func() (bool, error) {
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "sandbox-1"}, &p); err != nil {
			return false, err
		}
		for _, r := range p.OwnerReferences {
			if r.Kind == "EvalRun" && r.Name == "doomed" && r.UID == er.UID {
				return true, nil
			}
		}
		return false, fmt.Errorf("owner references %+v", p.OwnerReferences)
	})
	c.Kubectl(t, "delete", "-n", ns, "evalrun", "doomed", "--wait=false")
	waitFor(t, "the EvalRun to be gone", func() (bool, error) {
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "doomed"}, &v1alpha1.EvalRun{})
		return apierrors.IsNotFound(err), err
	})
	waitFor(t, "the run's pod to go with its EvalRun", func() (bool, error) {
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "sandbox-1"}, &corev1.Pod{})
		return apierrors.IsNotFound(err), err
	})
	run, err := srv.client.Run(context.Background(), er.Status.RunID)
	if err != nil {
		t.Fatal(err)
	}
	// The finalizer cancelled the run on the server (POST
	// /v1/runs/{id}/cancel): its trials, never leased, are cancelled.
	if run.Status != "cancelled" || run.Counts["cancelled"] == 0 || run.Counts["pending"]+run.Counts["running"] != 0 {
		t.Errorf("run %s after its EvalRun was deleted: %s, counts %v; want cancelled, every trial cancelled", run.ID, run.Status, run.Counts)
	}
}

// An operator pinned to its servers (--allow-server) submits nowhere else:
// the EvalRun waits in Pending and says why. The reconciler is called
// directly here, with no manager.
func TestEvalRunServerNotAllowed(t *testing.T) {
	c, cl, ns := cluster(t)
	tokenSecret(t, cl, ns, "tok-never-sent-0123456789")
	c.Kubectl(t, "apply", "-n", ns, "-f", writeFile(t, envelope("elsewhere", "http://127.0.0.1:1", tinyRun)))
	r := &controller.EvalRunReconciler{Client: cl, Servers: []string{"https://evalsid.evalsi.svc:8080"}}
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "elsewhere"}})
	if err == nil || !strings.Contains(err.Error(), "not a server this operator submits to") {
		t.Fatalf("Reconcile: %v", err)
	}
	er := getRun(t, cl, ns, "elsewhere")
	cond := meta.FindStatusCondition(er.Status.Conditions, v1alpha1.ConditionSubmitted)
	if er.Status.Phase != v1alpha1.PhasePending || cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "--allow-server") {
		t.Fatalf("phase %s, Submitted %+v", er.Status.Phase, cond)
	}
	if er.Status.Submission != nil || er.Status.RunID != "" {
		t.Errorf("status %+v records a submission", er.Status)
	}
	if strings.Contains(cond.Message, "tok-never-sent") {
		t.Error("the condition holds the token")
	}
}

// A token the server refuses leaves the EvalRun Pending (no run is made, so
// nothing is submitted twice); fixing the Secret submits it.
func TestEvalRunWrongTokenWaitsForTheRightOne(t *testing.T) {
	c, cl, ns := cluster(t)
	srv := startServer(t, false)
	tokenSecret(t, cl, ns, "tok-wrong-0123456789")
	startOperator(t, c, ns)
	c.Kubectl(t, "apply", "-n", ns, "-f", writeFile(t, envelope("token", srv.URL, tinyRun)))
	waitFor(t, "the Submitted condition to say the server refused the token", func() (bool, error) {
		er := getRun(t, cl, ns, "token")
		cond := meta.FindStatusCondition(er.Status.Conditions, v1alpha1.ConditionSubmitted)
		return cond != nil && cond.Reason == "NotAllowed" && er.Status.Phase == v1alpha1.PhasePending, fmt.Errorf("status %+v", er.Status)
	})
	var sec corev1.Secret
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "evalsi-token"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data["token"] = []byte(srv.Token)
	if err := cl.Update(context.Background(), &sec); err != nil {
		t.Fatal(err)
	}
	er := waitPhase(t, cl, ns, "token", v1alpha1.PhaseSubmitted, v1alpha1.PhaseRunning)
	if er.Status.RunID == "" || runsNamed(t, srv, "token") != 1 {
		t.Errorf("run id %q, %d runs named token on the server; want one", er.Status.RunID, runsNamed(t, srv, "token"))
	}
}
