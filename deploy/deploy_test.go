// Package deploy holds the Kubernetes manifests (kustomize): base/ and the
// overlays. Its tests render them with kubectl's kustomize, check every pod
// template's hardening field by field, and apply them to a real API server
// (internal/testenv/kubetest) with --dry-run=server.
package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/kubetest"
	"evals.si/server"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// The image the test overlay names, which tests import into the node.
const testImage = "evalsi.test/evalsid:test"

// kubectl finds a kubectl: the one scripts/build-kubernetes.sh built for
// the test cluster, else one on PATH (rendering needs no cluster).
func kubectl(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("EVALSI_CACHE")
	if cache == "" {
		cache = "/var/cache/evalsi"
	}
	if p := filepath.Join(cache, "kubernetes", kubetest.Version, "bin", "kubectl"); isExec(p) {
		return p
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Missing(t, "kubectl", "none built by scripts/build-kubernetes.sh and none on PATH")
	}
	return p
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// render runs `kubectl kustomize dir` and splits its output into objects.
func render(t *testing.T, bin, dir string) []object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "kustomize", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	var objs []object
	for _, doc := range strings.Split(stdout.String(), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("decoding a rendered object of %s: %v\n%s", dir, err, doc)
		}
		o.yaml = doc
		objs = append(objs, o)
	}
	return objs
}

// object is one rendered manifest.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	yaml string
}

func (o object) String() string { return o.Kind + " " + o.Metadata.Namespace + "/" + o.Metadata.Name }

// deployments decodes the rendered Deployments strictly: a misspelt field
// in a manifest is an error here, not a field the API server drops.
func deployments(t *testing.T, objs []object) []appsv1.Deployment {
	t.Helper()
	var out []appsv1.Deployment
	for _, o := range objs {
		if o.Kind != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(o.yaml), &d); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		out = append(out, d)
	}
	return out
}

// TestPodTemplatesAreHardened proves, field by field, that every pod the
// manifests (base and the test overlay) make is hardened: no
// service-account token but the operator's, no service links, no host
// namespaces or host paths, a non-root user, RuntimeDefault seccomp and
// all capabilities dropped with none added, no privilege escalation, a
// read-only root, resource requests and limits, liveness and readiness
// probes. sandboxd is the one exception, with exactly the relaxations
// bubblewrap needs (unconfined seccomp and AppArmor, unmasked /proc) and
// the pod user namespace that makes them unprivileged on the node.
func TestPodTemplatesAreHardened(t *testing.T) {
	bin := kubectl(t)
	for _, overlay := range []string{"base", "overlays/test"} {
		t.Run(overlay, func(t *testing.T) {
			deps := deployments(t, render(t, bin, overlay))
			var names []string
			for _, d := range deps {
				names = append(names, d.Name)
				checkPod(t, overlay, d)
			}
			slices.Sort(names)
			if want := []string{"evalsi-operator", "evalsi-server", "evalsi-worker", "sandboxd"}; !slices.Equal(names, want) {
				t.Errorf("Deployments %v, want %v", names, want)
			}
		})
	}
}

func checkPod(t *testing.T, overlay string, d appsv1.Deployment) {
	t.Helper()
	name := d.Name
	errorf := func(format string, args ...any) { t.Errorf("%s: "+format, append([]any{name}, args...)...) }
	ps := d.Spec.Template.Spec
	operator, sandboxd := name == "evalsi-operator", name == "sandboxd"

	// The namespace: sandboxd alone is outside evalsi (see namespace.yaml).
	if want := map[bool]string{true: "evalsi-sandbox", false: "evalsi"}[sandboxd]; d.Namespace != want {
		errorf("namespace %q, want %q", d.Namespace, want)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken != operator {
		errorf("automountServiceAccountToken %v, want %v (only the operator calls the API server)", deref(ps.AutomountServiceAccountToken), operator)
	}
	if operator && ps.ServiceAccountName != "evalsi-operator" {
		errorf("serviceAccountName %q, want evalsi-operator", ps.ServiceAccountName)
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		errorf("enableServiceLinks %v, want false", deref(ps.EnableServiceLinks))
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		errorf("host namespaces: network %v, pid %v, ipc %v", ps.HostNetwork, ps.HostPID, ps.HostIPC)
	}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			errorf("volume %s is a hostPath", v.Name)
		}
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit == nil {
			errorf("emptyDir %s has no sizeLimit", v.Name)
		}
	}
	sc := ps.SecurityContext
	if sc == nil {
		errorf("no pod securityContext")
		return
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		errorf("runAsNonRoot %v runAsUser %v, want true and a non-zero uid", deref(sc.RunAsNonRoot), deref(sc.RunAsUser))
	}
	wantSeccomp := corev1.SeccompProfileTypeRuntimeDefault
	if sandboxd {
		wantSeccomp = corev1.SeccompProfileTypeUnconfined
		if ps.HostUsers == nil || *ps.HostUsers {
			errorf("hostUsers %v, want false: the unmasked /proc and unconfined seccomp are bearable only in a pod user namespace", deref(ps.HostUsers))
		}
		if sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
			errorf("appArmorProfile %v, want Unconfined (the runtime's default profile denies mount)", sc.AppArmorProfile)
		}
	} else if sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
		errorf("appArmorProfile Unconfined")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != wantSeccomp {
		errorf("pod seccompProfile %v, want %s", sc.SeccompProfile, wantSeccomp)
	}
	if len(ps.InitContainers) > 0 || len(ps.EphemeralContainers) > 0 {
		errorf("init or ephemeral containers, which this test does not check")
	}
	for _, c := range ps.Containers {
		cname := name + "/" + c.Name
		cerr := func(format string, args ...any) { t.Errorf("%s: "+format, append([]any{cname}, args...)...) }
		if overlay == "overlays/test" && (c.Image != testImage || c.ImagePullPolicy != corev1.PullNever) {
			cerr("image %q pull %q, want %q pull Never", c.Image, c.ImagePullPolicy, testImage)
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			cerr("liveness %v readiness %v: both probes wanted", c.LivenessProbe != nil, c.ReadinessProbe != nil)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if !hasReq || !hasLim || lim.Cmp(req) < 0 || req.Cmp(resource.Quantity{}) <= 0 {
				cerr("%s request %v limit %v: want both, 0 < request <= limit", r, req.String(), lim.String())
			}
		}
		csc := c.SecurityContext
		if csc == nil {
			cerr("no securityContext")
			continue
		}
		if csc.Privileged != nil && *csc.Privileged {
			cerr("privileged")
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			cerr("allowPrivilegeEscalation %v, want false", deref(csc.AllowPrivilegeEscalation))
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			cerr("readOnlyRootFilesystem %v, want true", deref(csc.ReadOnlyRootFilesystem))
		}
		if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
			cerr("capabilities %v, want drop [ALL] and nothing added", csc.Capabilities)
		}
		if csc.RunAsUser != nil && *csc.RunAsUser == 0 || csc.RunAsNonRoot != nil && !*csc.RunAsNonRoot {
			cerr("the container overrides the pod's non-root user")
		}
		if csc.SeccompProfile != nil && csc.SeccompProfile.Type != wantSeccomp {
			cerr("container seccompProfile %v, want %s", csc.SeccompProfile, wantSeccomp)
		}
		wantProc := corev1.DefaultProcMount
		if sandboxd {
			wantProc = corev1.UnmaskedProcMount // bubblewrap mounts a /proc per sandbox
		}
		got := corev1.DefaultProcMount
		if csc.ProcMount != nil {
			got = *csc.ProcMount
		}
		if got != wantProc {
			cerr("procMount %q, want %q", got, wantProc)
		}
		for _, e := range c.Env {
			if e.Value != "" && secretish(e.Name) {
				cerr("variable %s has a literal value; secrets come from a Secret", e.Name)
			}
		}
	}
}

// secretish reports whether a variable's name says it holds a secret.
func secretish(name string) bool {
	for _, w := range []string{"TOKEN", "KEY", "PASSWORD", "SECRET", "DATABASE_URL", "DSN"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestServerConfigsLoad proves the server.yaml files the ConfigMaps carry
// are configs evalsid serve accepts (keys, types, the access section).
func TestServerConfigsLoad(t *testing.T) {
	for _, p := range []string{"base/config/server.yaml", "overlays/test/config/server.yaml"} {
		if _, err := server.LoadConfig(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestOverlayAppliesOnARealAPIServer proves the test overlay builds and a
// real API server accepts all of it: the CRDs and namespaces are applied
// (and the service account) for real, then everything with --dry-run=server (validation, defaulting,
// admission, the RBAC objects included), and each Deployment's pod, made
// as the ReplicaSet would make it, is admitted in its namespace (Pod
// Security "restricted" enforced in evalsi; sandboxd's pod user namespace
// and unmasked /proc accepted in evalsi-sandbox).
func TestOverlayAppliesOnARealAPIServer(t *testing.T) {
	c := kubetest.Shared(t, kubetest.Options{})
	objs := render(t, filepath.Join(c.BinDir, "kubectl"), "overlays/test")
	dir := t.TempDir()
	write := func(name string, keep func(object) bool) string {
		var b strings.Builder
		for _, o := range objs {
			if keep(o) {
				b.WriteString("---\n" + o.yaml + "\n")
			}
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Applied for real: what a dry-run of the rest needs to exist (a
	// namespaced object's namespace, a pod's service account).
	real := func(o object) bool {
		return o.Kind == "CustomResourceDefinition" || o.Kind == "Namespace" || o.Kind == "ServiceAccount"
	}
	crds := write("real.yaml", real)
	rest := write("rest.yaml", func(o object) bool { return !real(o) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), "--kubeconfig="+c.Kubeconfig,
			"delete", "--ignore-not-found", "--wait=false", "-f", crds).CombinedOutput()
		if err != nil {
			t.Logf("cleaning up: %v\n%s", err, out)
		}
	})
	// Server-side: the EvalRun CRD is larger than client-side apply's
	// last-applied annotation may be.
	c.Kubectl(t, "apply", "--server-side", "-f", crds)
	c.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/evalruns.evals.si", "crd/sandboxclasses.evals.si")
	out := c.Kubectl(t, "apply", "--dry-run=server", "-f", rest)
	for _, o := range objs {
		if !real(o) && !strings.Contains(out, strings.ToLower(o.Metadata.Name)) {
			t.Errorf("the dry-run apply did not mention %s:\n%s", o, out)
		}
	}

	// Deployments are not held to Pod Security; their pods are.
	for _, d := range deployments(t, objs) {
		pod := corev1.Pod{
			TypeMeta:   metaPod,
			ObjectMeta: d.Spec.Template.ObjectMeta,
			Spec:       d.Spec.Template.Spec,
		}
		pod.Name, pod.Namespace = d.Name+"-dry-run", d.Namespace
		b, err := yaml.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, d.Name+"-pod.yaml")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := kubectlOut(c, "create", "--dry-run=server", "-f", p)
		if err != nil {
			t.Errorf("the pod of %s is refused: %v\n%s", d.Name, err, out)
			continue
		}
		// evalsi warns on anything below "restricted" and enforces it;
		// evalsi-sandbox warns, and sandboxd is expected to be warned of.
		warned := strings.Contains(out, "PodSecurity")
		if d.Namespace == "evalsi" && warned {
			t.Errorf("the pod of %s breaks Pod Security restricted:\n%s", d.Name, out)
		}
		if d.Name == "sandboxd" && !warned {
			t.Errorf("sandboxd's pod draws no Pod Security warning; is evalsi-sandbox's warn label gone?\n%s", out)
		}
		if d.Name == "sandboxd" {
			// The unmasked /proc bubblewrap needs is not to be had
			// without the pod user namespace: the API server says so.
			pod.Spec.HostUsers = nil
			b, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := kubectlOut(c, "create", "--dry-run=server", "-f", p); err == nil || !strings.Contains(out, "procMount") {
				t.Errorf("sandboxd's pod with host users and an unmasked /proc: %v\n%s\nwant a refusal naming procMount", err, out)
			} else {
				t.Logf("without hostUsers: false, sandboxd's pod is refused: %s", strings.TrimSpace(out))
			}
		}
	}
}

var metaPod = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}

// kubectlOut runs kubectl with the cluster's admin kubeconfig and returns
// its combined output and error (Cluster.Kubectl fails the test instead).
func kubectlOut(c *kubetest.Cluster, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), err
}
