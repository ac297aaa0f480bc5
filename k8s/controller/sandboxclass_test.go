package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"evals.si/k8s/apis/v1alpha1"
)

// A SandboxClass makes its pool (no node is needed to check the objects):
// a Deployment of `evalsid sandboxd` with the class's settings and its TLS
// Secret mounted, and a Service, owned by the class; the pod rung's pool
// also gets the ServiceAccount and Role it makes sandbox pods with. The
// status names the address and says the pool is not ready while its pods
// are not; deleting the class deletes the pool.
func TestSandboxClassMakesItsPool(t *testing.T) {
	c, cl, ns := cluster(t)
	startOperator(t, c, ns)
	ctx := context.Background()
	gvisor := "gvisor"
	halfCPU := resource.MustParse("500m")
	classes := []*v1alpha1.SandboxClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "bw", Namespace: ns}, Spec: v1alpha1.SandboxClassSpec{
			Image: "evalsi.test/evalsid:1", Warm: 3, TLSSecretName: "bw-tls",
			Egress:    v1alpha1.Egress{AllowHosts: []string{"pypi.org"}},
			Limits:    v1alpha1.SandboxLimits{MemoryMB: 1024, CPUs: &halfCPU, Pids: 256, CommandTimeout: &metav1.Duration{Duration: 30 * time.Minute}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pods", Namespace: ns}, Spec: v1alpha1.SandboxClassSpec{
			Pool: v1alpha1.PoolPod, Image: "evalsi.test/evalsid:1", DefaultImage: "evalsi.test/task:1", Warm: 2, TLSSecretName: "pods-tls", RuntimeClassName: &gvisor,
		}},
	}
	for _, sc := range classes {
		if err := cl.Create(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}

	bw := waitDeployment(t, cl, ns, "sandboxd-bw")
	if *bw.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want warm 3", *bw.Spec.Replicas)
	}
	owned(t, bw.OwnerReferences, "bw")
	pod := bw.Spec.Template.Spec
	ctr := pod.Containers[0]
	for _, want := range [][]string{{"--rung", "bwrap"}, {"--allow-host-root"}, {"--allow-host", "pypi.org"},
		{"--max-memory-mb", "1024"}, {"--max-cpus", "0.5"}, {"--max-pids", "256"}, {"--max-command-timeout", "30m0s"}, {"--tls-cert", "/etc/evalsi/tls/tls.crt"}, {"--client-ca", "/etc/evalsi/tls/ca.crt"}} {
		if !hasPair(ctr.Args, want) {
			t.Errorf("args %v lack %v", ctr.Args, want)
		}
	}
	if ctr.Image != "evalsi.test/evalsid:1" || ctr.Resources.Limits.Memory().String() != "2Gi" {
		t.Errorf("container %s, resources %v", ctr.Image, ctr.Resources)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("the bwrap pool's pods get a token or service links: %+v", pod)
	}
	if pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "bw-tls" {
		t.Errorf("volumes %+v, want the TLS Secret bw-tls", pod.Volumes)
	}

	var svc corev1.Service
	waitFor(t, "Service sandboxd-bw", func() (bool, error) {
		err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sandboxd-bw"}, &svc)
		return err == nil, err
	})
	owned(t, svc.OwnerReferences, "bw")
	if svc.Spec.Ports[0].Port != 7443 || svc.Spec.Selector["app.kubernetes.io/instance"] != "bw" {
		t.Errorf("service %+v", svc.Spec)
	}

	pd := waitDeployment(t, cl, ns, "sandboxd-pods")
	ctr = pd.Spec.Template.Spec.Containers[0]
	for _, want := range [][]string{{"--rung", "pod"}, {"--pod-runtime-class", "gvisor"}, {"--pod-namespace", ns}, {"--pod-default-image", "evalsi.test/task:1"}} {
		if !hasPair(ctr.Args, want) {
			t.Errorf("pod pool args %v lack %v", ctr.Args, want)
		}
	}
	if *pd.Spec.Replicas != 1 || pd.Spec.Template.Spec.ServiceAccountName != "sandboxd-pods" || pd.Spec.Template.Spec.RuntimeClassName != nil {
		t.Errorf("pod pool deployment: replicas %d, service account %q, runtime class %v (the class is the sandboxes', not the pool's)",
			*pd.Spec.Replicas, pd.Spec.Template.Spec.ServiceAccountName, pd.Spec.Template.Spec.RuntimeClassName)
	}
	var role rbacv1.Role
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sandboxd-pods"}, &role); err != nil {
		t.Fatalf("the pod pool's Role: %v", err)
	}
	owned(t, role.OwnerReferences, "pods")
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods/exec") }) {
		t.Errorf("role rules %+v lack pods/exec", role.Rules)
	}

	var sc v1alpha1.SandboxClass
	waitFor(t, "the class's status", func() (bool, error) {
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bw"}, &sc); err != nil {
			return false, err
		}
		return sc.Status.Address != "" && meta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionReady) != nil, nil
	})
	if want := fmt.Sprintf("sandboxd-bw.%s.svc:7443", ns); sc.Status.Address != want {
		t.Errorf("address %q, want %q", sc.Status.Address, want)
	}
	// No node runs the pods, so the pool is not ready.
	if cond := meta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionReady); cond.Status != metav1.ConditionFalse {
		t.Errorf("Ready %+v with no node", cond)
	}

	// The class is the Deployment's controller: an edit of it is undone.
	bw = waitDeployment(t, cl, ns, "sandboxd-bw")
	one := int32(1)
	bw.Spec.Replicas = &one
	if err := cl.Update(ctx, bw); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reconciler to restore replicas", func() (bool, error) {
		d := waitDeployment(t, cl, ns, "sandboxd-bw")
		return *d.Spec.Replicas == 3, nil
	})

	// Deleting the class deletes its pool (the garbage collector follows
	// the owner references).
	if err := cl.Delete(ctx, classes[0], client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to go with its class", func() (bool, error) {
		err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sandboxd-bw"}, &appsv1.Deployment{})
		return apierrors.IsNotFound(err), err
	})
}

func waitDeployment(t *testing.T, cl client.Client, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	waitFor(t, "Deployment "+name, func() (bool, error) {
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d)
		return err == nil, err
	})
	return &d
}

func owned(t *testing.T, refs []metav1.OwnerReference, class string) {
	t.Helper()
	for _, r := range refs {
		if r.Kind == "SandboxClass" && r.Name == class && r.Controller != nil && *r.Controller {
			return
		}
	}
	t.Errorf("owner references %+v, want SandboxClass %s as controller", refs, class)
}

func hasPair(args, pair []string) bool {
	for i := 0; i+len(pair) <= len(args); i++ {
		if slices.Equal(args[i:i+len(pair)], pair) {
			return true
		}
	}
	return false
}
