package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"evals.si/k8s/apis/v1alpha1"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/store"
)

// poolKind is the rung the sandboxd pod runs.
type poolKind struct {
	rung string
	// args are sandboxd's rung flags; d is the deployment being made.
	args func(d *deployment) []string
	// kube: sandboxd calls the API server (the pod rung makes pods).
	kube bool
	// ladder, when set, is the run's environment.sandbox.ladder: the
	// default ladder (firecracker, bwrap, landlock) does not name the pod
	// rung, and a worker's only rung is the pool's.
	ladder string
}

var (
	bwrapPool = poolKind{rung: sandbox.RungBwrap, args: func(*deployment) []string { return []string{"--rung=bwrap", "--allow-host-root"} }}
	// The pod rung's sandboxes are pods of the imported image, which also
	// holds the helper; fix-calc-offline names no environment.image, so
	// they run the pool's default image (the root the bwrap rung's
	// sandboxes get), and its ladder names the pod rung.
	podPool = poolKind{rung: "pod", kube: true, ladder: "[pod]", args: func(d *deployment) []string {
		return []string{"--rung=pod", "--pod-namespace=" + d.ns, "--pod-pool=e2e", "--pod-helper-image=" + image,
			"--pod-pull-policy=Never", "--pod-default-image=" + image}
	}}
)

// deployment is one namespace's server, sandboxd and worker pods, and the
// operator watching the namespace.
type deployment struct {
	e                   *env
	ns                  string
	serverURL, poolAddr string
	data                string // the server's data directory (hostPath)
	st                  *store.Store
}

const (
	operatorToken = "tok-e2e-operator-0123456789abcdef"
	workerToken   = "tok-e2e-worker-0123456789abcdef"
	nonRoot       = int64(65532)
)

// deploy makes the namespace's objects and starts the operator; on a
// failure, from here on, the test logs the evidence.
func (e *env) deploy(t *testing.T, ns string, pool poolKind) *deployment {
	t.Helper()
	ctx := context.Background()
	serverPort, poolPort, poolHealth := freePort(t), freePort(t), freePort(t)
	d := &deployment{e: e, ns: ns, serverURL: fmt.Sprintf("http://127.0.0.1:%d", serverPort),
		poolAddr: fmt.Sprintf("127.0.0.1:%d", poolPort), data: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			d.evidence(t)
		}
	})

	// mTLS: the pool's server certificate from one CA, the workers' client
	// certificate from another; each side trusts only the other's CA.
	dir := t.TempDir()
	serverCA, clientCA := pooltest.NewCA(t, "e2e-pool-ca"), pooltest.NewCA(t, "e2e-worker-ca")
	poolCert, poolKey := pooltest.WriteFiles(t, pooltest.Issue(t, serverCA, "sandboxd", true), dir, "pool")
	workerCert, workerKey := pooltest.WriteFiles(t, pooltest.Issue(t, clientCA, "e2e-worker", false), dir, "worker")
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	secrets := []*corev1.Secret{
		{ObjectMeta: meta(ns, "sandboxd-tls"), Data: map[string][]byte{"tls.crt": read(poolCert), "tls.key": read(poolKey), "ca.crt": clientCA.PEM}},
		{ObjectMeta: meta(ns, "worker-tls"), Data: map[string][]byte{"tls.crt": read(workerCert), "tls.key": read(workerKey), "ca.crt": serverCA.PEM}},
		{ObjectMeta: meta(ns, "server-tokens"), Data: map[string][]byte{"operator": []byte(operatorToken), "worker": []byte(workerToken)}},
		{ObjectMeta: meta(ns, "evalsi-token"), Data: map[string][]byte{"token": []byte(operatorToken)}},
	}
	for _, s := range secrets {
		if _, err := e.cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Secret %s: %v", s.Name, err)
		}
	}
	conf := &corev1.ConfigMap{ObjectMeta: meta(ns, "evalsi-config"), Data: map[string]string{
		"server.yaml": fmt.Sprintf(`listen: 127.0.0.1:%d
store: {sqlite: /var/lib/evalsi/evalsi.db}
blobs_dir: /var/lib/evalsi/blobs
datasets_dir: /var/lib/evalsi/datasets
# Short leases: a killed worker's attempt comes back within seconds.
leases: {ttl: 6s, sweep: 500ms}
viewer: false
projects:
  - name: k8s
    members: [{user: op, role: editor}]
tokens:
  - {name: operator, user: op, project: k8s, token_env: EVALSI_OPERATOR_TOKEN}
  - {name: workers, service: worker, token_env: EVALSI_WORKER_TOKEN}
`, serverPort),
		"worker.yaml": fmt.Sprintf("sandbox:\n  address: %s\n  ca: /etc/evalsi/sandbox-tls/ca.crt\n  cert: /etc/evalsi/sandbox-tls/tls.crt\n  key: /etc/evalsi/sandbox-tls/tls.key\n", d.poolAddr),
	}}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, conf, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The server: SQLite on a hostPath in the test's temp dir (the node is
	// this machine), so the test reads the trials the server recorded.
	for _, sub := range []string{"blobs", "datasets"} {
		if err := os.MkdirAll(filepath.Join(d.data, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", nonRoot, nonRoot), d.data).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v\n%s", d.data, err, out)
	}
	hostDir := corev1.HostPathDirectory
	server := hardened(corev1.Container{Name: "server", Args: []string{"serve", "--config=/etc/evalsi/config/server.yaml"},
		Env:            []corev1.EnvVar{secretEnv("EVALSI_OPERATOR_TOKEN", "server-tokens", "operator"), secretEnv("EVALSI_WORKER_TOKEN", "server-tokens", "worker")},
		VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/evalsi/config", ReadOnly: true}, {Name: "data", MountPath: "/var/lib/evalsi"}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/readyz", Port: intPort(serverPort)}}, PeriodSeconds: 1},
	})
	e.createPod(t, ns, "server", podSpec([]corev1.Container{server}, []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "evalsi-config"}}}},
		{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: d.data, Type: &hostDir}}},
	}))

	// sandboxd, the pool.
	sbArgs := append([]string{"sandboxd", "--listen=" + d.poolAddr, fmt.Sprintf("--health-listen=127.0.0.1:%d", poolHealth),
		"--tls-cert=/etc/evalsi/tls/tls.crt", "--tls-key=/etc/evalsi/tls/tls.key", "--client-ca=/etc/evalsi/tls/ca.crt",
		"--state-dir=/var/lib/evalsi"}, pool.args(d)...)
	sb := corev1.Container{Name: "sandboxd", Args: sbArgs,
		VolumeMounts:   []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/evalsi/tls", ReadOnly: true}, {Name: "state", MountPath: "/var/lib/evalsi"}, {Name: "tmp", MountPath: "/tmp"}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/healthz", Port: intPort(poolHealth)}}, PeriodSeconds: 1},
	}
	var sbSpec corev1.PodSpec
	vols := []corev1.Volume{secretVol("tls", "sandboxd-tls"), emptyDir("state"), emptyDir("tmp")}
	if pool.kube {
		// The pod rung makes the sandboxes as pods: sandboxd runs no
		// sandbox itself and needs no privilege, only RBAC for pods, exec
		// and NetworkPolicies in its namespace.
		e.sandboxdRBAC(t, ns)
		api, err := url.Parse(e.c.RESTConfig.Host)
		if err != nil {
			t.Fatal(err)
		}
		// In-cluster config names the kubernetes Service's ClusterIP,
		// which does not route here (no kube-proxy): point it at the API
		// server's loopback address, which its certificate names.
		sb.Env = []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: api.Hostname()}, {Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()}}
		sbSpec = podSpec([]corev1.Container{hardened(sb)}, vols)
		sbSpec.ServiceAccountName = "sandboxd"
		sbSpec.AutomountServiceAccountToken = ptr(true)
	} else {
		// The bwrap rung inside a pod: bwrap makes a user namespace and
		// mounts a /proc of its own there. deploy/base/sandboxd.yaml gets
		// that with seccomp Unconfined and procMount Unmasked under
		// hostUsers: false; this node's containerd 1.6 has no pod user
		// namespaces (the API server allows Unmasked only with one), and
		// the test cluster refuses privileged pods. The kernel lets a user
		// namespace mount proc only where a proc is already fully visible
		// (runc masks paths of the container's own) and no more writable
		// than the new one, so the test's pool gets the node's /proc beside
		// its own (writable to root only, and sandboxd is not root):
		// test-only, to be replaced by F's manifest on containerd >= 2.0.
		// sandboxd stays unprivileged: non-root, every capability dropped,
		// no privilege escalation, read-only root; seccomp is Unconfined
		// as in F's manifest (RuntimeDefault refuses
		// unshare(CLONE_NEWUSER)), and bwrap puts its own filter on every
		// sandbox.
		sb = hardened(sb)
		sb.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		sb.VolumeMounts = append(sb.VolumeMounts, corev1.VolumeMount{Name: "host-proc", MountPath: "/run/evalsi/host-proc"})
		hostProc := corev1.HostPathDirectory
		vols = append(vols, corev1.Volume{Name: "host-proc", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/proc", Type: &hostProc}}})
		sbSpec = podSpec([]corev1.Container{sb}, vols)
	}
	e.createPod(t, ns, "sandboxd", sbSpec)

	// Two workers (a Deployment: a killed one is replaced), unprivileged,
	// with no way to run a sandbox of their own: every one is leased.
	worker := hardened(corev1.Container{Name: "worker",
		Args: []string{"worker", "--server=" + d.serverURL, "--config=/etc/evalsi/config/worker.yaml", "--name=$(POD_NAME)", "--slots=2", "--state-dir=/var/lib/evalsi"},
		Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			secretEnv("EVALSI_TOKEN", "server-tokens", "worker")},
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/evalsi/config", ReadOnly: true},
			{Name: "sandbox-tls", MountPath: "/etc/evalsi/sandbox-tls", ReadOnly: true}, {Name: "state", MountPath: "/var/lib/evalsi"}, {Name: "tmp", MountPath: "/tmp"}},
	})
	wspec := podSpec([]corev1.Container{worker}, []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "evalsi-config"}}}},
		secretVol("sandbox-tls", "worker-tls"), emptyDir("state"), emptyDir("tmp")})
	wspec.RestartPolicy = corev1.RestartPolicyAlways
	labels := map[string]string{"app": "worker"}
	dep := &appsv1.Deployment{ObjectMeta: meta(ns, "worker"), Spec: appsv1.DeploymentSpec{
		Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: wspec}}}
	if _, err := e.cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.c.Kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=100s", "pod/server", "pod/sandboxd")
	e.c.Kubectl(t, "rollout", "status", "-n", ns, "deployment/worker", "--timeout=100s")
	d.operator(t)
	return d
}

// operator runs `evalsid operator` on this machine with the admin
// kubeconfig, watching the test's namespace only.
func (d *deployment) operator(t *testing.T) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, d.e.bin, "operator", "--kubeconfig", d.e.c.Kubeconfig, "--namespace", d.ns,
		"--metrics-listen=0", fmt.Sprintf("--health-listen=127.0.0.1:%d", freePort(t)), "--poll=500ms")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("operator log:\n%s", tail(b, 8000))
		}
	})
}

func (e *env) sandboxdRBAC(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta(ns, "sandboxd")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: meta(ns, "sandboxd"), Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"create", "get", "list", "delete"}},
	}}
	if _, err := e.cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: meta(ns, "sandboxd"),
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "sandboxd"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sandboxd", Namespace: ns}}}
	if _, err := e.cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) createPod(t *testing.T, ns, name string, spec corev1.PodSpec) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: meta(ns, name), Spec: spec}
	p.Labels = map[string]string{"app": name}
	if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

// podSpec is a pod on the host's network (Services do not route on this
// cluster; the node is this machine and everything listens on loopback),
// with no API credentials and no service variables.
func podSpec(cs []corev1.Container, vols []corev1.Volume) corev1.PodSpec {
	return corev1.PodSpec{
		HostNetwork: true, DNSPolicy: corev1.DNSClusterFirstWithHostNet,
		AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
		RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr(int64(5)),
		Containers: cs, Volumes: vols,
	}
}

// hardened runs c from the image as a non-root user with every capability
// dropped, RuntimeDefault seccomp and a read-only root.
func hardened(c corev1.Container) corev1.Container {
	c.Image, c.ImagePullPolicy, c.Command = image, corev1.PullNever, []string{"/usr/local/bin/evalsid"}
	c.Env = append(c.Env, corev1.EnvVar{Name: "HOME", Value: "/tmp"})
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser: ptr(nonRoot), RunAsGroup: ptr(nonRoot), RunAsNonRoot: ptr(true),
		AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	return c
}

func intPort(p int) intstr.IntOrString { return intstr.FromInt32(int32(p)) }

func meta(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

func ptr[T any](v T) *T { return &v }

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

func secretVol(name, secret string) corev1.Volume {
	// 0444: the pods' users are not the Secret's owner.
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr(int32(0o444))}}}
}

func emptyDir(name string) corev1.Volume {
	size := resource.MustParse("2Gi")
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}}
}

// store opens the server's SQLite file (shared with the server pod: WAL,
// readers do not block its writer).
func (d *deployment) store(t *testing.T) *store.Store {
	t.Helper()
	if d.st != nil {
		return d.st
	}
	var err error
	waitFor(t, "the server's store", func() (bool, error) {
		d.st, err = store.Open(context.Background(), filepath.Join(d.data, "evalsi.db"))
		return err == nil, err
	})
	t.Cleanup(func() { d.st.Close() })
	return d.st
}

// waitRun waits until the EvalRun fix-calc satisfies cond.
func (d *deployment) waitRun(t *testing.T, what string, cond func(*v1alpha1.EvalRun) bool) *v1alpha1.EvalRun {
	t.Helper()
	var er v1alpha1.EvalRun
	waitFor(t, what, func() (bool, error) {
		if err := d.e.cl.Get(context.Background(), types.NamespacedName{Namespace: d.ns, Name: "fix-calc"}, &er); err != nil {
			return false, err
		}
		if er.Status.Phase == v1alpha1.PhaseFailed || er.Status.Phase == v1alpha1.PhaseInvalid {
			t.Fatalf("waiting for %s: the EvalRun ended %s: trials %+v, conditions %+v", what, er.Status.Phase, er.Status.Trials, er.Status.Conditions)
		}
		return cond(&er), fmt.Errorf("phase %q, trials %+v, conditions %+v", er.Status.Phase, er.Status.Trials, er.Status.Conditions)
	})
	return &er
}

// evidence logs what a failure needs: the pods and their logs, the
// EvalRun's status and the server's trial errors.
func (d *deployment) evidence(t *testing.T) {
	kubectl := func(args ...string) string {
		out, err := exec.Command(filepath.Join(d.e.c.BinDir, "kubectl"), append([]string{"--kubeconfig", d.e.c.Kubeconfig, "-n", d.ns}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%s(kubectl %s: %v)", out, strings.Join(args, " "), err)
		}
		return string(out)
	}
	t.Logf("pods:\n%s", kubectl("get", "pods", "-o", "wide"))
	pods, err := d.e.cs.CoreV1().Pods(d.ns).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			t.Logf("logs of pod %s:\n%s", p.Name, tail([]byte(kubectl("logs", p.Name, "--all-containers")), 8000))
			if p.Status.Phase != corev1.PodRunning {
				t.Logf("pod %s:\n%s", p.Name, tail([]byte(kubectl("describe", "pod", p.Name)), 4000))
			}
		}
	}
	t.Logf("EvalRun:\n%s", kubectl("get", "evalrun", "fix-calc", "-o", "yaml"))
	if d.st != nil {
		var er v1alpha1.EvalRun
		if err := d.e.cl.Get(context.Background(), types.NamespacedName{Namespace: d.ns, Name: "fix-calc"}, &er); err == nil && er.Status.RunID != "" {
			if ts, err := d.st.ListAttempts(context.Background(), er.Status.RunID); err == nil {
				t.Logf("the server's attempts: %s", attemptsLine(ts))
			}
		}
	}
}

func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
