package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"evals.si/k8s/apis/v1alpha1"
)

// The pool's port and where its TLS Secret is mounted.
const (
	PoolPort   = 7443
	tlsDir     = "/etc/evalsi/tls"
	stateDir   = "/var/lib/evalsi"
	poolPrefix = "sandboxd-"
)

// SandboxClassReconciler keeps each SandboxClass's pool: a Deployment of
// `evalsid sandboxd` and a Service in front of it (and, for the pod rung,
// the ServiceAccount and Role its pods create sandbox pods with), all
// owned by the class so they go with it.
type SandboxClassReconciler struct {
	Client client.Client
	Log    *slog.Logger
}

// SetupWithManager registers the reconciler; changes to the objects it owns
// (a Deployment becoming available) wake it.
func (r *SandboxClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Log == nil {
		r.Log = slog.Default()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.SandboxClass{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Named("sandboxclass").
		Complete(r)
}

// Reconcile makes the class's objects match it and reports readiness.
func (r *SandboxClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Log == nil {
		r.Log = slog.Default()
	}
	var sc v1alpha1.SandboxClass
	if err := r.Client.Get(ctx, req.NamespacedName, &sc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !sc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references delete the pool
	}
	want := PoolObjects(&sc)
	for _, obj := range want.all() {
		if err := r.apply(ctx, &sc, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	var dep appsv1.Deployment
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(want.Deployment), &dep); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the pool Deployment of SandboxClass %s: %w", req, err)
	}
	before := sc.Status.DeepCopy()
	sc.Status.ObservedGeneration = sc.Generation
	sc.Status.ReadyReplicas = dep.Status.ReadyReplicas
	sc.Status.Address = fmt.Sprintf("%s.%s.svc:%d", want.Service.Name, sc.Namespace, PoolPort)
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Starting", ObservedGeneration: sc.Generation,
		Message: fmt.Sprintf("%d of %d pool pods ready", dep.Status.ReadyReplicas, *want.Deployment.Spec.Replicas)}
	if dep.Status.ObservedGeneration >= dep.Generation && dep.Status.ReadyReplicas >= *want.Deployment.Spec.Replicas && dep.Status.UpdatedReplicas >= *want.Deployment.Spec.Replicas {
		cond.Status, cond.Reason = metav1.ConditionTrue, "PoolReady"
	}
	meta.SetStatusCondition(&sc.Status.Conditions, cond)
	if !equality.Semantic.DeepEqual(before, &sc.Status) {
		if err := r.Client.Status().Update(ctx, &sc); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the status of SandboxClass %s: %w", req, err)
		}
	}
	return ctrl.Result{}, nil
}

// apply creates obj or updates the existing object's spec to obj's, owned
// by the class.
func (r *SandboxClassReconciler) apply(ctx context.Context, sc *v1alpha1.SandboxClass, obj client.Object) error {
	desired := obj.DeepCopyObject().(client.Object)
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, obj, func() error {
		copyDesired(obj, desired)
		return controllerutil.SetControllerReference(sc, obj, r.Client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("applying %T %s of SandboxClass %s/%s: %w", obj, obj.GetName(), sc.Namespace, sc.Name, err)
	}
	return nil
}

// copyDesired sets the fields the reconciler owns on an existing object,
// leaving what the apiserver defaulted or another controller set.
func copyDesired(obj, desired client.Object) {
	obj.SetLabels(desired.GetLabels())
	switch o := obj.(type) {
	case *appsv1.Deployment:
		d := desired.(*appsv1.Deployment)
		o.Spec.Replicas = d.Spec.Replicas
		o.Spec.Selector = d.Spec.Selector
		o.Spec.Template = d.Spec.Template
	case *corev1.Service:
		d := desired.(*corev1.Service)
		o.Spec.Selector = d.Spec.Selector
		o.Spec.Ports = d.Spec.Ports
	case *corev1.ServiceAccount:
		o.AutomountServiceAccountToken = desired.(*corev1.ServiceAccount).AutomountServiceAccountToken
	case *rbacv1.Role:
		o.Rules = desired.(*rbacv1.Role).Rules
	case *rbacv1.RoleBinding:
		d := desired.(*rbacv1.RoleBinding)
		o.Subjects = d.Subjects
		if o.CreationTimestamp.IsZero() {
			o.RoleRef = d.RoleRef // immutable once made
		}
	}
}

// Pool is the objects a SandboxClass makes.
type Pool struct {
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	// Set for the pod rung only: the identity its pods create sandbox pods as.
	ServiceAccount *corev1.ServiceAccount
	Role           *rbacv1.Role
	RoleBinding    *rbacv1.RoleBinding
}

func (p Pool) all() []client.Object {
	out := []client.Object{}
	if p.ServiceAccount != nil {
		out = append(out, p.ServiceAccount, p.Role, p.RoleBinding)
	}
	return append(out, p.Deployment, p.Service)
}

// PoolObjects is what the class's pool is made of. It is a plain function
// of the class, so the tests check it field by field.
func PoolObjects(sc *v1alpha1.SandboxClass) Pool {
	name := poolPrefix + sc.Name
	labels := map[string]string{
		"app.kubernetes.io/name":       "evalsi-sandboxd",
		"app.kubernetes.io/instance":   sc.Name,
		"app.kubernetes.io/managed-by": "evalsi",
	}
	selector := map[string]string{"app.kubernetes.io/name": "evalsi-sandboxd", "app.kubernetes.io/instance": sc.Name}
	om := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: sc.Namespace, Labels: labels}
	}
	pool := sc.Spec.Pool
	if pool == "" {
		pool = v1alpha1.PoolSandboxd
	}
	replicas := sc.Spec.Warm
	if pool == v1alpha1.PoolPod {
		// One pool pod drives the sandbox pods; warm counts sandboxes.
		replicas = 1
	}
	replicas = max(replicas, 1)

	no, yes := false, true
	uid := int64(65532)
	// The image's entrypoint is evalsid.
	args := []string{"sandboxd",
		"--listen", ":" + strconv.Itoa(PoolPort),
		"--tls-cert", tlsDir + "/tls.crt", "--tls-key", tlsDir + "/tls.key", "--client-ca", tlsDir + "/ca.crt",
		"--state-dir", stateDir,
	}
	container := corev1.Container{
		Name:            "sandboxd",
		Image:           sc.Spec.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Ports:           []corev1.ContainerPort{{Name: "sandboxd", ContainerPort: PoolPort, Protocol: corev1.ProtocolTCP}},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "tls", MountPath: tlsDir, ReadOnly: true},
			{Name: "state", MountPath: stateDir},
			{Name: "tmp", MountPath: "/tmp"},
		},
		// The pool serves only mutual TLS; a TCP probe needs no certificate.
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(PoolPort)}}, PeriodSeconds: 5},
		LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(PoolPort)}}, PeriodSeconds: 20, FailureThreshold: 3},
	}
	podSpec := corev1.PodSpec{
		EnableServiceLinks: &no,
		Volumes: []corev1.Volume{
			// Group-readable (fsGroup) for the non-root user.
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sc.Spec.TLSSecretName, DefaultMode: ptr(int32(0o440))}}},
			{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	var out Pool
	switch pool {
	case v1alpha1.PoolPod:
		// sandboxd talks to the API server and makes hardened pods; it
		// needs no privilege of its own.
		args = append(args, "--rung", "pod", "--pod-namespace", sc.Namespace, "--pod-pool", sc.Name)
		if rc := sc.Spec.RuntimeClassName; rc != nil && *rc != "" {
			args = append(args, "--pod-runtime-class", *rc)
		}
		args = append(args, "--pod-helper-image", sc.Spec.Image)
		if sc.Spec.DefaultImage != "" {
			args = append(args, "--pod-default-image", sc.Spec.DefaultImage)
		}
		if q, ok := sc.Spec.Resources.Limits[corev1.ResourceCPU]; ok {
			args = append(args, "--pod-cpu", q.String())
		}
		if q, ok := sc.Spec.Resources.Limits[corev1.ResourceMemory]; ok {
			args = append(args, "--pod-memory", q.String())
		}
		// warm: sandboxes started ahead of leases are not there yet (the
		// pool makes each pod when it is leased); the class keeps one pool.
		container.SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes, RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
		podSpec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		podSpec.ServiceAccountName = name
		podSpec.AutomountServiceAccountToken = &yes
		out.ServiceAccount = &corev1.ServiceAccount{ObjectMeta: om(), AutomountServiceAccountToken: &no}
		out.Role = &rbacv1.Role{ObjectMeta: om(), Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "delete", "deletecollection"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "create", "delete", "deletecollection"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews"}, Verbs: []string{"create"}},
		}}
		out.RoleBinding = &rbacv1.RoleBinding{ObjectMeta: om(),
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: sc.Namespace}}}
	default:
		// What bubblewrap needs in a pod, as deploy/base/sandboxd.yaml
		// says at length: an unconfined seccomp and AppArmor profile (the
		// runtime defaults refuse unshare with namespace flags, and mount),
		// an unmasked /proc (each sandbox mounts its own), which Kubernetes
		// allows only with a user namespace of the pod's own (hostUsers:
		// false). No capability, no privilege escalation, not root, a
		// read-only root, and no service-account token: the pool never
		// calls the API server.
		//
		// The pool pod's root is the evalsid image: sandboxes without an
		// image of their own run on it, as in a worker's own sandboxes.
		args = append(args, "--rung", "bwrap", "--allow-host-root")
		if sc.Spec.Resources.Limits != nil || sc.Spec.Resources.Requests != nil {
			container.Resources = sc.Spec.Resources
		}
		unmasked := corev1.UnmaskedProcMount
		container.SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			ProcMount:    &unmasked,
		}
		podSpec.HostUsers = &no
		podSpec.SecurityContext = &corev1.PodSecurityContext{
			RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
			SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
		}
		podSpec.AutomountServiceAccountToken = &no
		podSpec.RuntimeClassName = sc.Spec.RuntimeClassName
	}
	for _, h := range sc.Spec.Egress.AllowHosts {
		args = append(args, "--allow-host", h)
	}
	args = append(args, limitArgs(sc.Spec.Limits)...)
	container.Args = args
	podSpec.Containers = []corev1.Container{container}

	out.Deployment = &appsv1.Deployment{ObjectMeta: om(), Spec: appsv1.DeploymentSpec{
		Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: selector},
		Template: corev1.PodTemplateSpec{
			// Not labelled evals.si/pool: that label is the sandbox pods',
			// and the pod rung's sweeper deletes by it.
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       podSpec,
		},
	}}
	out.Service = &corev1.Service{ObjectMeta: om(), Spec: corev1.ServiceSpec{
		Selector: selector,
		Ports:    []corev1.ServicePort{{Name: "sandboxd", Port: PoolPort, TargetPort: intstr.FromString("sandboxd"), Protocol: corev1.ProtocolTCP}},
	}}
	return out
}

func ptr[T any](v T) *T { return &v }

// limitArgs are sandboxd's --max-* flags for a class's limits.
func limitArgs(l v1alpha1.SandboxLimits) []string {
	var args []string
	for _, f := range []struct {
		flag string
		v    int32
	}{{"--max-memory-mb", l.MemoryMB}, {"--max-pids", l.Pids}, {"--max-disk-mb", l.DiskMB}, {"--max-file-size-mb", l.FileSizeMB}} {
		if f.v > 0 {
			args = append(args, f.flag, strconv.Itoa(int(f.v)))
		}
	}
	if l.CPUs != nil && l.CPUs.Sign() > 0 {
		args = append(args, "--max-cpus", strconv.FormatFloat(l.CPUs.AsApproximateFloat64(), 'g', -1, 64))
	}
	if l.CommandTimeout != nil && l.CommandTimeout.Duration > 0 {
		args = append(args, "--max-command-timeout", l.CommandTimeout.Duration.String())
	}
	return args
}
