package kubetest_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"evals.si/internal/testenv/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.kubetest.evals.si
spec:
  group: kubetest.evals.si
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
`

// A CRD applies with kubectl, and the apiserver validates custom objects
// against its schema: a conforming object is stored, others are refused as
// invalid.
func TestCRDValidatesAgainstSchema(t *testing.T) {
	c := kubetest.Shared(t, kubetest.Options{})
	ns := c.Namespace(t)
	file := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(file, []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Kubectl(t, "apply", "-f", file)
	c.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/widgets.kubetest.evals.si")

	dyn := dynamic.NewForConfigOrDie(c.RESTConfig)
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "kubetest.evals.si", Version: "v1", Resource: "widgets"}).Namespace(ns)
	widget := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kubetest.evals.si/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}
	}
	ctx := context.Background()
	if _, err := widgets.Create(ctx, widget("good", map[string]any{"size": int64(3)}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a widget that conforms to the schema: %v", err)
	}
	for _, tc := range []struct {
		name string
		spec map[string]any
	}{
		{"too-small", map[string]any{"size": int64(0)}},
		{"not-a-number", map[string]any{"size": "big"}},
		{"missing", map[string]any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := widgets.Create(ctx, widget(tc.name, tc.spec), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.size") {
				t.Fatalf("creating widget with spec %v: want an Invalid error about spec.size, got %v", tc.spec, err)
			}
		})
	}
}

// A user's client certificate authenticates them with no rights; RBAC then
// grants exactly what a binding says.
func TestUserConfigIsSubjectToRBAC(t *testing.T) {
	c := kubetest.Shared(t, kubetest.Options{})
	ns := c.Namespace(t)
	ctx := context.Background()
	nobody := kubernetes.NewForConfigOrDie(c.UserConfig(t, "nobody"))
	_, err := nobody.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"nobody"`) {
		t.Fatalf("listing pods as nobody: want Forbidden naming the user, got %v", err)
	}

	admin := kubernetes.NewForConfigOrDie(c.RESTConfig)
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "readers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "readers"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := kubernetes.NewForConfigOrDie(c.UserConfig(t, "someone", "readers"))
	waitFor(t, "the group binding to let someone list pods", func() (bool, error) {
		_, err := reader.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil // the authorizer's cache has not seen the binding yet
		}
		return err == nil, err
	})
	if err := reader.CoreV1().Pods(ns).Delete(ctx, "any", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a pod with list rights only: want Forbidden, got %v", err)
	}
	if _, err := nobody.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods as nobody after binding another group: want Forbidden, got %v", err)
	}
}

// Deleting an owner deletes its dependents: the controller-manager's
// garbage collector runs.
func TestGarbageCollectorDeletesDependents(t *testing.T) {
	c := kubetest.Shared(t, kubetest.Options{})
	ns := c.Namespace(t)
	ctx := context.Background()
	cms := kubernetes.NewForConfigOrDie(c.RESTConfig).CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:            "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dependent to be collected", func() (bool, error) {
		_, err := cms.Get(ctx, "dependent", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// A pod from an imported image runs on the node; its logs read back through
// the API, and exec works through the API.
func TestPodRunsLogsAndExec(t *testing.T) {
	c := kubetest.Shared(t, kubetest.Options{Node: true})
	ns := c.Namespace(t)
	image := toyboxImage(t, c)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig)
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "toy"},
		Spec:       toySpec(image, "hello-from-pod"),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cs, ns, pod.Name)

	var logs []byte
	waitFor(t, "the pod's log line", func() (bool, error) {
		logs, err = cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(logs), "hello-from-pod"), nil
	})

	stdout, stderr, err := execIn(ctx, c.RESTConfig, cs, ns, pod.Name, "/toybox", "echo", "hello", "exec")
	if err != nil || stdout != "hello exec\n" {
		t.Fatalf("exec in the pod: stdout %q, stderr %q, err %v; want stdout %q", stdout, stderr, err, "hello exec\n")
	}

	// The pod is on the cluster's bridge with a route to its subnet only:
	// no default route, so no outside address is reachable from a pod.
	routes, stderr, err := execIn(ctx, c.RESTConfig, cs, ns, pod.Name, "/toybox", "cat", "/proc/net/route")
	if err != nil {
		t.Fatalf("reading the pod's routes: %v (stderr %q)", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(routes), "\n")[1:]
	if len(lines) == 0 {
		t.Fatalf("the pod has no routes at all (no network?):\n%s", routes)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 2 && f[1] == "00000000" {
			t.Errorf("the pod has a default route (%s); pods must reach only the cluster's bridge:\n%s", l, routes)
		}
	}
}

// A Deployment creates its pod (the controller-manager's deployment and
// replica-set controllers, the scheduler and the kubelet all work), and
// deleting the Deployment takes its ReplicaSet and pod with it.
func TestDeploymentCreatesPodAndGoesWithIt(t *testing.T) {
	c := kubetest.Shared(t, kubetest.Options{Node: true})
	ns := c.Namespace(t)
	image := toyboxImage(t, c)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig)
	labels := map[string]string{"app": "toy"}
	one := int32(1)
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "toy"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: toySpec(image, "deployed")},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var podName string
	waitFor(t, "the Deployment's pod", func() (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=toy"})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		podName = pods.Items[0].Name
		return true, nil
	})
	waitRunning(t, cs, ns, podName)

	background := metav1.DeletePropagationBackground
	if err := cs.AppsV1().Deployments(ns).Delete(ctx, "toy", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ReplicaSet and the pod to be collected", func() (bool, error) {
		rs, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(rs.Items) == 0 && len(pods.Items) == 0, nil
	})
}

func toySpec(image, word string) corev1.PodSpec {
	grace := int64(1)
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{
			Name: "toy", Image: image, ImagePullPolicy: corev1.PullNever,
			Command: []string{"/toybox", "serve", word},
		}},
	}
}

// toyboxImage imports the test pods' image: a root filesystem holding only
// the static toybox program (testdata/toybox).
func toyboxImage(t *testing.T, c *kubetest.Cluster) string {
	t.Helper()
	const ref = "evalsi.test/kubetest-toybox:1"
	rootfs := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(rootfs, "toybox"), "./testdata/toybox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building toybox: %v\n%s", err, out)
	}
	c.ImportImage(t, ref, rootfs)
	return ref
}

func waitRunning(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	var last *corev1.Pod
	waitFor(t, "pod "+name+" to run", func() (bool, error) {
		pod, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = pod
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("pod %s ended: %+v", name, pod.Status)
		}
		return pod.Status.Phase == corev1.PodRunning, nil
	}, func() string {
		if last == nil {
			return ""
		}
		return "last status: " + last.Status.String()
	})
}

// execIn runs a command in the pod's container through the apiserver, over
// WebSocket, or SPDY where the server refuses the upgrade.
func execIn(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod string, command ...string) (string, string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

// waitFor polls cond until it holds; an error from cond is remembered and
// shown should the wait end without it holding.
func waitFor(t *testing.T, what string, cond func() (bool, error), detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	msg := ""
	for _, d := range detail {
		msg += " " + d()
	}
	t.Fatalf("waiting for %s: gave up after 2m (last error: %v)%s", what, last, msg)
}
