package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"evals.si/sandbox"
	podrung "evals.si/sandbox/pod"
)

// podFlags are `evalsid sandboxd --rung pod`'s: where the pool makes its
// sandbox pods and what every pod gets by default (the names the
// SandboxClass controller passes).
type podFlags struct {
	kubeconfig, namespace, pool, runtimeClass, helperImage, pullPolicy string
	defaultImage                                                       string
	cpu, memory                                                        string
	diskMB                                                             int
}

func (p *podFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.kubeconfig, "kubeconfig", "", "with --rung pod: the cluster (default: $KUBECONFIG, else the pod's service account)")
	fs.StringVar(&p.namespace, "pod-namespace", "", "with --rung pod: the namespace the sandbox pods run in")
	fs.StringVar(&p.pool, "pod-pool", "", "with --rung pod: this pool's name on its pods (label evals.si/pool)")
	fs.StringVar(&p.runtimeClass, "pod-runtime-class", "", "with --rung pod: runtimeClassName of every sandbox pod (gvisor, kata, ...)")
	fs.StringVar(&p.helperImage, "pod-helper-image", "", "with --rung pod: the image holding /evalsi-pod-helper (copied into each pod by its init container)")
	fs.StringVar(&p.defaultImage, "pod-default-image", "", "with --rung pod: the image of sandboxes whose environment names none (default: such a sandbox is refused)")
	fs.StringVar(&p.pullPolicy, "pod-pull-policy", "", "with --rung pod: imagePullPolicy of the task and helper images (default IfNotPresent)")
	fs.StringVar(&p.cpu, "pod-cpu", "", "with --rung pod: each sandbox pod's CPU limit when the run sets none (a quantity: 2, 500m)")
	fs.StringVar(&p.memory, "pod-memory", "", "with --rung pod: each sandbox pod's memory limit when the run sets none (a quantity: 4Gi)")
	fs.IntVar(&p.diskMB, "pod-disk-mb", 0, "with --rung pod: each sandbox pod's ephemeral-storage limit in MB when the run sets none")
}

// rung makes the pod rung from the flags; a flag that does not parse is
// a usage error naming it.
func (p *podFlags) rung(logger *slog.Logger) (*podrung.Rung, error) {
	if p.namespace == "" || p.helperImage == "" {
		return nil, fmt.Errorf("--rung pod needs --pod-namespace NS and --pod-helper-image IMAGE")
	}
	var limits sandbox.Limits
	if p.cpu != "" {
		q, err := resource.ParseQuantity(p.cpu)
		if err != nil || q.Sign() <= 0 {
			return nil, fmt.Errorf("--pod-cpu %q: want a positive quantity such as 2 or 500m", p.cpu)
		}
		limits.CPUs = q.AsApproximateFloat64()
	}
	if p.memory != "" {
		q, err := resource.ParseQuantity(p.memory)
		if err != nil || q.Value() < 1<<20 {
			return nil, fmt.Errorf("--pod-memory %q: want a quantity of at least 1Mi, such as 4Gi", p.memory)
		}
		limits.MemoryMB = int(q.Value() >> 20)
	}
	if p.diskMB < 0 {
		return nil, fmt.Errorf("--pod-disk-mb %d: want 0 or more", p.diskMB)
	}
	limits.DiskMB = p.diskMB
	switch p.pullPolicy {
	case "", "Always", "IfNotPresent", "Never":
	default:
		return nil, fmt.Errorf("--pod-pull-policy %q: Always, IfNotPresent or Never", p.pullPolicy)
	}
	cfg, err := restConfig(p.kubeconfig)
	if err != nil {
		return nil, err
	}
	return podrung.New(podrung.Options{Config: cfg, Namespace: p.namespace, Pool: p.pool, RuntimeClassName: p.runtimeClass,
		Resources: limits, HelperImage: p.helperImage, DefaultImage: p.defaultImage, PullPolicy: p.pullPolicy, Logger: logger})
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
func (l *stringList) Type() string       { return "string" }
