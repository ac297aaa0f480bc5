// Package e2e runs Evals.si end to end on a real Kubernetes (kubetest's
// cluster with a node): an EvalRun applied with kubectl is submitted by the
// operator to an `evalsid serve` pod and run by two `evalsid worker` pods
// that lease every sandbox over mutual TLS from an `evalsid sandboxd` pod;
// one worker is killed mid-run and no trial is lost or duplicated.
//
// The objects are made here in Go rather than from deploy/overlays/test:
// the test cluster has no kube-proxy, so a Service's ClusterIP does not
// route, and every pod runs with hostNetwork on loopback ports the test
// picks (the node is this machine); the overlay's fixed namespace and ports
// would also collide with another test binary's cluster.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/benchimage"
	"evals.si/internal/testenv/kubetest"
	"evals.si/internal/testenv/servertest"
	"evals.si/k8s/apis/v1alpha1"
	"evals.si/sandbox"
	"evals.si/store"
)

func TestMain(m *testing.M) {
	// The test's controller-runtime client logs nothing worth keeping.
	ctrllog.SetLogger(logr.Discard())
	kubetest.Main(m)
}

// image is the one image every pod runs: the local Debian root (python3,
// pytest, git: what fix-calc-offline's sandboxes need, since the task names
// no image and the bwrap rung runs on the pool's own root), plus evalsid,
// bubblewrap and the pod rung's helper.
const image = "evalsi.test/e2e:1"

// env is what the subtests share: the cluster with the CRDs and the image.
type env struct {
	c   *kubetest.Cluster
	cs  kubernetes.Interface
	cl  client.Client
	bin string // evalsid on this machine (the operator runs from it)
}

var (
	imageOnce sync.Once
	imageErr  error
)

func setup(t *testing.T) *env {
	t.Helper()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		testenv.Missing(t, "bubblewrap", "/usr/bin/bwrap is not installed (the sandboxd pod's bwrap rung is copied from it)")
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		testenv.Missing(t, "ldd", "ldd lists the shared libraries bwrap needs in the image")
	}
	c := kubetest.Shared(t, kubetest.Options{Node: true})
	bin := servertest.Evalsid(t) // go build with CGO_ENABLED=0: a static binary the image can run
	root := benchimage.Root(t, "../..")
	imageOnce.Do(func() { imageErr = buildImage(t, c, bin, root) })
	if imageErr != nil {
		t.Fatalf("making the image %s: %v", image, imageErr)
	}
	c.Kubectl(t, "apply", "-k", filepath.Join("..", "..", "deploy", "crds"))
	c.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/evalruns.evals.si", "crd/sandboxclasses.evals.si")
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return &env{c: c, cs: cs, cl: cl, bin: bin}
}

// buildImage copies the Debian root (never touching the cached one), adds
// evalsid, bwrap with the shared libraries the root lacks, and the pod
// rung's helper, and imports it into the node.
func buildImage(t *testing.T, c *kubetest.Cluster, bin, debian string) error {
	root := filepath.Join(t.TempDir(), "rootfs")
	if out, err := exec.Command("cp", "-a", debian, root).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the Debian root: %v\n%s", err, out)
	}
	copies := map[string]string{bin: "/usr/local/bin/evalsid", "/usr/bin/bwrap": "/usr/bin/bwrap"}
	out, err := exec.Command("ldd", "/usr/bin/bwrap").Output()
	if err != nil {
		return fmt.Errorf("ldd /usr/bin/bwrap: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		// "libcap.so.2 => /lib/x86_64-linux-gnu/libcap.so.2 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)".
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "/") {
				if _, err := os.Stat(filepath.Join(root, f)); err != nil {
					copies[f] = f
				}
				break
			}
		}
	}
	for from, to := range copies {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, to)), 0o755); err != nil {
			return err
		}
		if out, err := exec.Command("cp", "-L", from, filepath.Join(root, to)).CombinedOutput(); err != nil {
			return fmt.Errorf("copying %s into the image: %v\n%s", from, err, out)
		}
	}
	// The pod rung's helper image holds /evalsi-pod-helper at its root.
	build := exec.Command("go", "build", "-o", filepath.Join(root, "evalsi-pod-helper"), "evals.si/sandbox/pod/cmd/evalsi-pod-helper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the pod rung's helper: %v\n%s", err, out)
	}
	c.ImportImage(t, image, root)
	return nil
}

// freePort returns a loopback port free now (the pods bind it on the host's
// network).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The "Done when": an EvalRun applied with kubectl runs
// fix-calc-offline to completion through server and worker pods, with
// sandboxes leased over mTLS from a sandboxd pod, and again on the pod
// rung; a worker pod killed mid-run loses no trial.
func TestEvalRunThroughPods(t *testing.T) {
	e := setup(t)
	t.Run("bwrap", func(t *testing.T) { e.run(t, bwrapPool) })
	t.Run("pod", func(t *testing.T) { e.run(t, podPool) })
}

// trials is how many trials the EvalRun asks for: with two workers of two
// slots each, all run at once, so the killed worker holds at least one.
const trials = 4

func (e *env) run(t *testing.T, pool poolKind) {
	ns := e.c.Namespace(t)
	d := e.deploy(t, ns, pool)

	// The run file, wrapped in the EvalRun envelope, applied with kubectl.
	run, err := os.ReadFile(filepath.Join("..", "..", "examples", "agents", "fix-calc-offline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	body := string(run) + fmt.Sprintf("trials: %d\nconcurrency: %d\n", trials, trials)
	if pool.ladder != "" {
		const sb = "\n  sandbox:\n"
		if !strings.Contains(body, sb) {
			t.Fatalf("fix-calc-offline.yaml has no environment.sandbox block to add ladder %s to", pool.ladder)
		}
		body = strings.Replace(body, sb, sb+"    ladder: "+pool.ladder+"\n", 1)
	}
	doc := envelope("fix-calc", d.serverURL, body)
	path := filepath.Join(t.TempDir(), "evalrun.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	e.c.Kubectl(t, "apply", "-n", ns, "-f", path)

	// Once a worker pod holds a running trial, kill that pod at once.
	er := d.waitRun(t, "the run to be submitted", func(er *v1alpha1.EvalRun) bool { return er.Status.RunID != "" })
	runID := er.Status.RunID
	st := d.store(t)
	var seen *sandboxPods
	if pool.rung == sandbox.RungPod {
		seen = e.watchSandboxPods(t, ns)
	}
	var victim string
	var victimAttempt store.Trial
	waitFor(t, "a trial running on a worker pod", func() (bool, error) {
		ts, err := st.ListAttempts(context.Background(), runID)
		if err != nil {
			return false, err
		}
		done := 0
		for _, tr := range ts {
			// A lease's owner is "<token name>/<worker name>"; the
			// workers are named after their pods.
			pod := tr.LeaseOwner[strings.LastIndex(tr.LeaseOwner, "/")+1:]
			if tr.Status == store.TrialRunning && strings.HasPrefix(pod, "worker-") {
				victim, victimAttempt = pod, tr
				return true, nil
			}
			if tr.Status == store.TrialFinished || tr.Status == store.TrialErrored {
				done++
			}
		}
		if done == trials {
			t.Fatalf("every trial ended before one was seen running, so no worker could be killed mid-run: %s", attemptsLine(ts))
		}
		return false, fmt.Errorf("attempts: %s", attemptsLine(ts))
	})
	t.Logf("killing worker pod %s, which runs trial %s/%d attempt %d", victim, victimAttempt.RecordID, victimAttempt.Trial, victimAttempt.Attempt)
	e.c.Kubectl(t, "delete", "pod", "-n", ns, victim, "--grace-period=0", "--force")

	er = d.waitRun(t, "the EvalRun to succeed", func(er *v1alpha1.EvalRun) bool { return er.Status.Phase == v1alpha1.PhaseSucceeded })
	if c := er.Status.Trials; c.Total != trials || c.Passed != trials || c.Failed+c.Errored+c.Running+c.Pending != 0 {
		t.Errorf("EvalRun status trials %+v; want all %d passed", c, trials)
	}

	if seen != nil {
		seen.check(t, e, ns, runID)
	}

	// The server's trials: every one passed, on the pool's rung, leased.
	ts, err := st.ListTrials(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != trials {
		t.Errorf("the server has %d trials, want %d: %s", len(ts), trials, attemptsLine(ts))
	}
	for _, tr := range ts {
		if tr.Status != store.TrialFinished || tr.Passed == nil || !*tr.Passed {
			t.Errorf("trial %s/%d attempt %d: %s passed=%v error %s %s; want finished and passed", tr.RecordID, tr.Trial, tr.Attempt, tr.Status, tr.Passed, tr.ErrorKind, tr.Error)
		}
		var rep sandbox.Report
		if err := json.Unmarshal(tr.Isolation, &rep); err != nil {
			t.Errorf("trial %s/%d: isolation report %s: %v", tr.RecordID, tr.Trial, tr.Isolation, err)
			continue
		}
		if rep.Rung != pool.rung || !strings.Contains(strings.Join(rep.Notes, "\n"), "leased from the sandbox pool at "+d.poolAddr) {
			t.Errorf("trial %s/%d: isolation report rung %q, notes %q; want rung %s leased from the sandbox pool at %s", tr.RecordID, tr.Trial, rep.Rung, rep.Notes, pool.rung, d.poolAddr)
		}
	}

	// The workers made no sandbox of their own (they could not: no
	// capability, RuntimeDefault seccomp): nothing of a sandbox's state is
	// in their state or temp directories.
	pods, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=worker"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		for _, f := range strings.Fields(e.c.Kubectl(t, "exec", "-n", ns, p.Name, "--", "find", "/var/lib/evalsi", "/tmp")) {
			if base := filepath.Base(f); strings.HasPrefix(base, "sb-") || strings.Contains(f, "bwrap") {
				t.Errorf("worker pod %s holds sandbox state: %s", p.Name, f)
			}
		}
	}

	// The kill: the victim's attempt was taken back (lost) and the trial ran
	// again; no trial has two finished attempts, and none is missing.
	all, err := st.ListAttempts(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		record string
		trial  int
	}
	finished := map[key]int{}
	for _, tr := range all {
		if tr.Status == store.TrialFinished {
			finished[key{tr.RecordID, tr.Trial}]++
		}
		if tr.ID == victimAttempt.ID && tr.Status == store.TrialFinished {
			t.Errorf("the killed worker's attempt %s finished (%s): the kill landed after it, so nothing was proven about lost attempts", tr.ID, attemptsLine(all))
		}
	}
	for _, tr := range ts {
		if n := finished[key{tr.RecordID, tr.Trial}]; n != 1 {
			t.Errorf("trial %s/%d has %d finished attempts, want 1: %s", tr.RecordID, tr.Trial, n, attemptsLine(all))
		}
		if tr.RecordID == victimAttempt.RecordID && tr.Trial == victimAttempt.Trial && tr.Attempt <= victimAttempt.Attempt {
			t.Errorf("trial %s/%d ended at attempt %d; the killed worker held attempt %d, so a later one should have finished it", tr.RecordID, tr.Trial, tr.Attempt, victimAttempt.Attempt)
		}
	}
	t.Logf("attempts: %s", attemptsLine(all))
}

func attemptsLine(ts []store.Trial) string {
	var b strings.Builder
	for _, tr := range ts {
		fmt.Fprintf(&b, "[%s/%d#%d %s on %s", tr.RecordID, tr.Trial, tr.Attempt, tr.Status, tr.LeaseOwner)
		if tr.Error != "" {
			fmt.Fprintf(&b, ": %s %s", tr.ErrorKind, tr.Error)
		}
		b.WriteString("] ")
	}
	return b.String()
}

// envelope wraps a run file in an EvalRun named name that submits to
// server in project k8s with the token in Secret evalsi-token.
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

// waitFor polls cond until it holds (kubetest.WaitFor, 8 minutes).
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	kubetest.WaitFor(t, what, 8*time.Minute, cond)
}

// sandboxPods records the pod rung's sandbox pods seen in a namespace
// while a run goes on.
type sandboxPods struct {
	mu   sync.Mutex
	pods map[string]corev1.Pod
	stop chan struct{}
	done chan struct{}
}

// watchSandboxPods lists the namespace's sandbox pods (the pool's label)
// until check, keeping the last copy of each.
func (e *env) watchSandboxPods(t *testing.T, ns string) *sandboxPods {
	w := &sandboxPods{pods: map[string]corev1.Pod{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			l, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "evals.si/pool=e2e"})
			if err == nil {
				w.mu.Lock()
				for _, p := range l.Items {
					w.pods[p.Name] = p
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-w.stop:
		default:
			close(w.stop)
		}
		<-w.done
	})
	return w
}

// check: the run's sandboxes were pods of the pool, labelled with the
// run (by which the EvalRun owns them), of the default image; once the
// run is over the pool has removed every one.
func (w *sandboxPods) check(t *testing.T, e *env, ns, runID string) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pods) == 0 {
		t.Fatalf("no sandbox pod (label evals.si/pool=e2e) was seen in namespace %s during the run", ns)
	}
	owned := 0
	for name, p := range w.pods {
		if got := p.Labels["evals.si/run"]; got != runID {
			t.Errorf("sandbox pod %s: label evals.si/run %q, want the run %s", name, got, runID)
		}
		if img := p.Spec.Containers[0].Image; img != image {
			t.Errorf("sandbox pod %s runs image %s, want the pool's default image %s", name, img, image)
		}
		for _, o := range p.OwnerReferences {
			if o.Kind == "EvalRun" {
				owned++
			}
		}
	}
	t.Logf("%d sandbox pods seen; %d of them (as last seen) owned by the EvalRun", len(w.pods), owned)
	if owned == 0 {
		// The operator adopts labelled pods each time it polls the run
		// (every 2 s at first): a pod lives through a whole trial.
		t.Errorf("no sandbox pod was seen with the EvalRun as an owner")
	}
	waitFor(t, "the pool to remove its sandbox pods", func() (bool, error) {
		l, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "evals.si/pool=e2e"})
		if err != nil {
			return false, err
		}
		if len(l.Items) == 0 {
			return true, nil
		}
		return false, fmt.Errorf("%d sandbox pods left, e.g. %s", len(l.Items), l.Items[0].Name)
	})
}
