package pod

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"evals.si/sandbox"
	"evals.si/sandbox/pod/internal/helper"
)

// Labels on every sandbox pod and NetworkPolicy. The EvalRun controller
// adopts and cleans up pods by them: keep the keys.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "evalsi"
	LabelPool      = "evals.si/pool"
	LabelSandbox   = "evals.si/sandbox"
	// LabelRun is Config.Run, when it is a valid label value: the EvalRun
	// controller makes the EvalRun of that run the pod's owner.
	LabelRun = "evals.si/run"
	// LabelOwner is a hash of Config.Owner (a label value is at most 63
	// characters of a restricted alphabet); AnnotationOwner holds it whole,
	// for the Sweeper.
	LabelOwner      = "evals.si/owner"
	AnnotationOwner = "evals.si/owner"
)

// Container names.
const (
	containerSandbox = "sandbox"
	containerHelper  = "install-helper"
)

// helperVolume holds the helper binary; helperDirSize bounds it.
const (
	helperVolume  = "evalsi-helper"
	helperDirSize = "64Mi"
)

// OwnerHash is the evals.si/owner label value of an owner.
func OwnerHash(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:16])
}

func (r *Rung) labels(id string, cfg sandbox.Config) map[string]string {
	l := map[string]string{LabelManagedBy: ManagedBy, LabelPool: r.o.Pool, LabelSandbox: id}
	if cfg.Owner != "" {
		l[LabelOwner] = OwnerHash(cfg.Owner)
	}
	if cfg.Run != "" && len(validation.IsValidLabelValue(cfg.Run)) == 0 {
		l[LabelRun] = cfg.Run
	}
	return l
}

// limits merges a sandbox's limits over the pool's defaults.
func (r *Rung) limits(l sandbox.Limits) sandbox.Limits {
	d := r.o.Resources
	if l.MemoryMB <= 0 {
		l.MemoryMB = d.MemoryMB
	}
	if l.CPUs <= 0 {
		l.CPUs = d.CPUs
	}
	if l.DiskMB <= 0 {
		l.DiskMB = d.DiskMB
	}
	if l.FileSizeMB <= 0 {
		l.FileSizeMB = d.FileSizeMB
	}
	if l.PidsMax <= 0 {
		l.PidsMax = d.PidsMax
	}
	return l
}

// containerCaps is what the docker rung's policy grants root inside:
// Docker's default set (sandbox.ContainerCapabilities), after dropping ALL.
func containerCaps() []corev1.Capability {
	out := make([]corev1.Capability, 0, len(sandbox.ContainerCapabilities))
	for _, c := range sandbox.ContainerCapabilities {
		out = append(out, corev1.Capability(strings.TrimPrefix(c, "CAP_")))
	}
	return out
}

// securityContext is every container's: the docker rung's policy spelled
// out. allowPrivilegeEscalation false is no_new_privs, as the docker rung's
// no-new-privileges: a setuid binary gains nothing, so a non-root user
// cannot get back to root's capabilities.
func securityContext(readOnlyRoot bool, caps []corev1.Capability) *corev1.SecurityContext {
	f, root := false, int64(0)
	pm := corev1.DefaultProcMount
	return &corev1.SecurityContext{
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: caps},
		Privileged:               &f,
		AllowPrivilegeEscalation: &f,
		ReadOnlyRootFilesystem:   &readOnlyRoot,
		// Root, as the docker rung's keeper: the helper switches to the
		// command's user itself, resolved in the image's own /etc/passwd.
		RunAsUser:      &root,
		RunAsGroup:     &root,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		ProcMount:      &pm,
	}
}

// resources are requests = limits (Guaranteed QoS when memory and cpu are
// both set): a sandbox never runs on capacity the scheduler did not reserve.
func resources(l sandbox.Limits) corev1.ResourceRequirements {
	rl := corev1.ResourceList{}
	if l.MemoryMB > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(int64(l.MemoryMB)<<20, resource.BinarySI)
	}
	if l.CPUs > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPUs*1000), resource.DecimalSI)
	}
	if l.DiskMB > 0 {
		rl[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(l.DiskMB)<<20, resource.BinarySI)
	}
	if len(rl) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Requests: rl.DeepCopy(), Limits: rl}
}

// podSpec is the hardened pod of one sandbox.
func (r *Rung) podSpec(name, id string, cfg sandbox.Config) *corev1.Pod {
	f, zero := false, int64(0)
	lim := r.limits(cfg.Limits)
	res := resources(lim)
	pull := corev1.PullPolicy(r.o.PullPolicy)
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	mounts := []corev1.VolumeMount{{Name: helperVolume, MountPath: helper.Dir, ReadOnly: true}}
	sizeLimit := resource.MustParse(helperDirSize)
	vols := []corev1.Volume{{Name: helperVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &sizeLimit}}}}
	if cfg.ReadOnlyRoot {
		// The workdir and /tmp stay writable, as on every rung.
		for _, v := range []struct{ name, path string }{{"workdir", cfg.Workdir}, {"tmp", "/tmp"}} {
			vols = append(vols, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			mounts = append(mounts, corev1.VolumeMount{Name: v.name, MountPath: v.path})
		}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.o.Namespace, Labels: r.labels(id, cfg)},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			// No resolver in any mode: network deny has none to ask, and
			// allowlist and allow go through the egress proxy, which
			// resolves names itself. 127.0.0.1 in the pod's own network
			// namespace answers nothing.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name:            containerHelper,
				Image:           r.o.HelperImage,
				ImagePullPolicy: pull,
				Command:         []string{"/evalsi-pod-helper", "install", helper.Dir},
				VolumeMounts:    []corev1.VolumeMount{{Name: helperVolume, MountPath: helper.Dir}},
				Resources:       res,
				// Copying a file needs no capability.
				SecurityContext: securityContext(true, nil),
			}},
			Containers: []corev1.Container{{
				Name:            containerSandbox,
				Image:           cfg.Image,
				ImagePullPolicy: pull,
				Command:         []string{helper.Path, "init", cfg.Workdir},
				Args:            []string{},
				WorkingDir:      cfg.Workdir,
				// No env: commands get theirs over the exec stream, so a
				// secret env_from maps never lands in the pod object (etcd).
				VolumeMounts:    mounts,
				Resources:       res,
				SecurityContext: securityContext(cfg.ReadOnlyRoot, containerCaps()),
			}},
			Volumes: vols,
		},
	}
	if cfg.Owner != "" {
		p.Annotations = map[string]string{AnnotationOwner: cfg.Owner}
	}
	if rc := r.o.RuntimeClassName; rc != "" {
		p.Spec.RuntimeClassName = &rc
	}
	return p
}

// proxyAddr is the egress proxy pods of cfg reach: the pool's, else a
// TCP address the policy names. It must be an IP: a NetworkPolicy's
// ipBlock cannot name a host.
func (r *Rung) proxyAddr(cfg sandbox.Config) (ip net.IP, port int, addr string, err error) {
	addr = r.o.ProxyAddr
	if addr == "" {
		addr = cfg.Policy.ProxyAddr
	}
	if addr == "" || strings.HasPrefix(addr, "unix:") {
		return nil, 0, "", fmt.Errorf("network %s needs the pool's egress proxy as ip:port reachable from pods (the pod rung's ProxyAddr; got %q)", cfg.Policy.Network, addr)
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, 0, "", fmt.Errorf("egress proxy address %q: %w", addr, err)
	}
	ip = net.ParseIP(h)
	port, perr := strconv.Atoi(p)
	if ip == nil || perr != nil {
		return nil, 0, "", fmt.Errorf("egress proxy address %q must be ip:port (a NetworkPolicy ipBlock cannot name a host)", addr)
	}
	return ip, port, addr, nil
}

// networkPolicy selects the one sandbox pod: no ingress; egress nowhere
// under deny, else only to the egress proxy. It is per sandbox, not per
// pool, because the network mode is per sandbox (a trial's checker may
// run with another policy than its agent) and a deny pod must not share an
// allow pod's rule.
func (r *Rung) networkPolicy(name, id string, cfg sandbox.Config) (*netv1.NetworkPolicy, error) {
	np := &netv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.o.Namespace, Labels: r.labels(id, cfg)},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: id}},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
			Ingress:     []netv1.NetworkPolicyIngressRule{},
			Egress:      []netv1.NetworkPolicyEgressRule{},
		},
	}
	if cfg.Owner != "" {
		np.Annotations = map[string]string{AnnotationOwner: cfg.Owner}
	}
	if cfg.Policy.Network == sandbox.NetworkDeny || cfg.Policy.Network == "" {
		return np, nil
	}
	ip, port, _, err := r.proxyAddr(cfg)
	if err != nil {
		return nil, err
	}
	bits := 32
	if ip.To4() == nil {
		bits = 128
	}
	tcp := corev1.ProtocolTCP
	pp := intstr.FromInt32(int32(port))
	np.Spec.Egress = []netv1.NetworkPolicyEgressRule{{
		To:    []netv1.NetworkPolicyPeer{{IPBlock: &netv1.IPBlock{CIDR: fmt.Sprintf("%s/%d", ip, bits)}}},
		Ports: []netv1.NetworkPolicyPort{{Protocol: &tcp, Port: &pp}},
	}}
	return np, nil
}
