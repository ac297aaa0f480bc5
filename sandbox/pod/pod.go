// Package pod is the "pod" sandbox rung (isolation level container, or vm
// under a virtualising runtime class): one hardened pod per sandbox in a
// Kubernetes namespace, commands and files through the pod exec API.
//
// The pod runs Config.Image. An init container (Options.HelperImage) copies
// a static helper (cmd/evalsi-pod-helper) into an emptyDir that the sandbox
// container mounts read-only at helper.Dir; the helper is the container's
// pid 1 and, once per pod exec, runs one command as docker exec would (user
// from the pod's own /etc/passwd, env, workdir, stdin, timeout, output cap,
// leftovers killed) or reads or writes one file, so the image needs no
// shell. See hardening.go for the pod spec and its NetworkPolicy.
//
// The rung cannot snapshot: the engine replays setup once per trial.
package pod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/sandbox"
)

// Name is the rung's name.
const Name = sandbox.RungPod

// Options configure the rung.
type Options struct {
	// Config reaches the API server as an identity that may create,
	// delete and exec into pods and manage NetworkPolicies in Namespace.
	Config    *rest.Config
	Namespace string
	// Pool names this pool's pods (label evals.si/pool); the Sweeper only
	// touches its own pool's pods.
	Pool string
	// RuntimeClassName is passed through to every pod (gvisor, kata, ...).
	RuntimeClassName string
	// VMRuntimeClasses are the runtime classes that run pods in a guest
	// kernel (the report's isolation is vm under them). Nil: the default
	// list, "kata", "kata-*", "gvisor" and "runsc" (gVisor's user-space
	// kernel counts as a guest kernel: the host's is not reachable).
	VMRuntimeClasses []string
	// Resources apply when a sandbox's Config.Limits leave them zero.
	Resources sandbox.Limits
	// HelperImage holds /evalsi-pod-helper at its root (a static binary).
	HelperImage string
	// DefaultImage runs the sandboxes whose Config names no image (an
	// environment without environment.image, which other rungs run on
	// their machine's own root). Empty: such a sandbox is refused.
	DefaultImage string
	// PullPolicy of the task and helper images ("Never" in tests; empty:
	// IfNotPresent).
	PullPolicy string
	// ProxyAddr is the pool's egress proxy ("ip:port", reachable from
	// pods): allowlist and allow sandboxes get HTTP(S)_PROXY to it and a
	// NetworkPolicy egress rule to it alone. Empty: allowlist is refused.
	ProxyAddr string
	Logger    *slog.Logger
}

// Rung makes pod sandboxes.
type Rung struct {
	o   Options
	cs  kubernetes.Interface
	log *slog.Logger
}

var (
	_ sandbox.Rung    = (*Rung)(nil)
	_ sandbox.Sweeper = (*Rung)(nil)
)

// New returns the rung; it does not contact the API server (Probe does).
func New(o Options) (*Rung, error) {
	if o.Config == nil {
		return nil, fmt.Errorf("pod rung: no Kubernetes client config (a kubeconfig, or in-cluster credentials)")
	}
	if o.Namespace == "" {
		return nil, fmt.Errorf("pod rung: no namespace")
	}
	if o.HelperImage == "" {
		return nil, fmt.Errorf("pod rung: no helper image (an image with a static /evalsi-pod-helper at its root)")
	}
	if o.Pool == "" {
		o.Pool = "default"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return nil, fmt.Errorf("pod rung: making a Kubernetes client: %w", err)
	}
	return &Rung{o: o, cs: cs, log: o.Logger.With("rung", Name, "namespace", o.Namespace, "pool", o.Pool)}, nil
}

func (*Rung) Name() string { return Name }

// Isolation is the rung's level: container, or vm under a runtime class
// that runs pods in a guest kernel.
func (r *Rung) Isolation() sandbox.Level {
	if r.vmRuntime() {
		return sandbox.LevelVM
	}
	return sandbox.LevelContainer
}

func (r *Rung) vmRuntime() bool {
	rc := r.o.RuntimeClassName
	if rc == "" {
		return false
	}
	list := r.o.VMRuntimeClasses
	if list == nil {
		list = []string{"kata", "kata-*", "gvisor", "runsc"}
	}
	for _, p := range list {
		if p == rc || (strings.HasSuffix(p, "*") && strings.HasPrefix(rc, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

// Probe checks that the API server answers and that this identity may do
// what sandboxes need in the namespace.
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Rung: Name, Isolation: r.Isolation()}
	if err := r.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		p.Reason = fmt.Sprintf("the Kubernetes API server at %s does not answer: %v", r.o.Config.Host, err)
		return p
	}
	for _, a := range []authv1.ResourceAttributes{
		{Verb: "create", Resource: "pods"},
		{Verb: "delete", Resource: "pods"},
		{Verb: "create", Resource: "pods", Subresource: "exec"},
		{Verb: "create", Resource: "networkpolicies", Group: "networking.k8s.io"},
		{Verb: "delete", Resource: "networkpolicies", Group: "networking.k8s.io"},
	} {
		a.Namespace = r.o.Namespace
		rev, err := r.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err != nil {
			p.Reason = fmt.Sprintf("asking the API server whether this identity may %s: %v", describe(a), err)
			return p
		}
		if !rev.Status.Allowed {
			p.Reason = fmt.Sprintf("this identity may not %s in namespace %s (grant it with a Role and RoleBinding)", describe(a), r.o.Namespace)
			return p
		}
	}
	p.Works = true
	return p
}

func describe(a authv1.ResourceAttributes) string {
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	return a.Verb + " " + res
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
