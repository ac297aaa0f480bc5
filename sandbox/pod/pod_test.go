package pod

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"evals.si/internal/testenv/benchimage"
	"evals.si/internal/testenv/kubetest"
	"evals.si/sandbox"
	"evals.si/sandbox/pod/internal/helper"
	"evals.si/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// The images every test uses, imported once per test binary.
const (
	testImage   = "evalsi.test/pod-debian:1"
	helperImage = "evalsi.test/pod-helper:1"
)

var importOnce sync.Once

// cluster starts the shared cluster with a node and imports the local
// Debian image and a helper image holding the helper built from this tree.
func cluster(t *testing.T) *kubetest.Cluster {
	t.Helper()
	c := kubetest.Shared(t, kubetest.Options{Node: true})
	importOnce.Do(func() {
		root := benchimage.Root(t, "../..")
		dir := t.TempDir()
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "evalsi-pod-helper"), "./cmd/evalsi-pod-helper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the pod helper: %v\n%s", err, out)
		}
		c.ImportImage(t, helperImage, dir)
		c.ImportImage(t, testImage, root)
	})
	return c
}

func newTestRung(t *testing.T, c *kubetest.Cluster, ns string, mut func(*Options)) *Rung {
	t.Helper()
	o := Options{Config: c.RESTConfig, Namespace: ns, Pool: "test", HelperImage: helperImage, PullPolicy: "Never"}
	if mut != nil {
		mut(&o)
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// suiteOptions declares what the pod rung does not do, and why.
func suiteOptions() sandboxtest.Options {
	return sandboxtest.Options{
		Config: func(c *sandbox.Config) { c.Image = testImage },
		Users:  func(t *testing.T, c *sandbox.Config) { c.Image = testImage },
		Gaps: map[string]string{
			sandboxtest.CapSnapshot: "a pod's filesystem cannot become a layer new pods start from; setup runs once per trial",
			sandboxtest.CapEtcFiles: "the kubelet writes the pod's /etc/hosts (its own IPv6 lines, fe00::… where Docker writes ff0x::…) and /etc/resolv.conf from dnsPolicy, which the rung sets to None with nameserver 127.0.0.1 on purpose (no resolver in any mode); the hostname is 12 hex digits and resolves, as in Docker",
		},
		NotRun: map[string]string{
			sandboxtest.RowForkBomb: "Kubernetes has no per-pod pids field: pids_max is not applied, a pod's processes are bounded only by the kubelet's podPidsLimit (not set on the test node)",
		},
	}
}

// suite makes the rung the suites run against, in a namespace of their
// own, and their options. The suites' egress proxy listens on the test
// host's 127.0.0.1, which no pod can reach: a forwarder on the host's
// address on the pods' bridge relays to it, standing in for the pool's
// egress proxy (Options.ProxyAddr) a pod reaches on a real cluster.
func suite(t *testing.T) (func(*testing.T) sandbox.Rung, sandboxtest.Options) {
	c := cluster(t)
	r := newTestRung(t, c, c.Namespace(t), nil)
	if p := r.Probe(t.Context()); !p.Works {
		t.Fatalf("probe: %s", p.Reason)
	}
	o := suiteOptions()
	bridge := bridgeAddr(t, r)
	if bridge == nil {
		o.NotRun[sandboxtest.RowAllowlistBypass] = "no host address on the pods' network was found to relay the suite's proxy from"
		return func(*testing.T) sandbox.Rung { return r }, o
	}
	base := o.Config
	o.Config = func(cfg *sandbox.Config) {
		base(cfg)
		if a := cfg.Policy.ProxyAddr; strings.HasPrefix(a, "127.0.0.1:") {
			cfg.Policy.ProxyAddr = relay(t, bridge, a)
		}
	}
	return func(*testing.T) sandbox.Rung { return r }, o
}

// bridgeAddr is the test host's address on the pods' network: the
// interface whose subnet holds a pod's IP.
func bridgeAddr(t *testing.T, r *Rung) net.IP {
	t.Helper()
	sb, err := r.Create(t.Context(), sandbox.Config{Image: testImage, Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	p, err := r.cs.CoreV1().Pods(r.o.Namespace).Get(t.Context(), sb.(*Sandbox).Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podIP := net.ParseIP(p.Status.PodIP)
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && podIP != nil && n.Contains(podIP) && !n.IP.Equal(podIP) {
			return n.IP
		}
	}
	return nil
}

// relay forwards TCP from a listener on ip to target until t ends.
func relay(t *testing.T, ip net.IP, target string) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatalf("relay listener: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(u, c)
				io.Copy(c, u)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestConformance(t *testing.T) {
	newRung, o := suite(t)
	sandboxtest.Conformance(t, newRung, o)
}

func TestEscapes(t *testing.T) {
	newRung, o := suite(t)
	sandboxtest.Escapes(t, newRung, o)
}

// TestPodHardening asserts the pod spec's hardening field by field on the
// pod and NetworkPolicy the API server stored, not on the objects sent.
func TestPodHardening(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		policy sandbox.Policy
		ro     bool
	}{
		{"deny-readonly", sandbox.Policy{Network: sandbox.NetworkDeny}, true},
		{"allowlist", sandbox.Policy{Network: sandbox.NetworkAllowlist, AllowHosts: []string{"pypi.org"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRung(t, c, ns, func(o *Options) {
				o.ProxyAddr = "10.99.0.7:3128"
				o.Resources = sandbox.Limits{CPUs: 0.5}
			})
			sb, err := r.Create(ctx, sandbox.Config{
				Image: testImage, Workdir: "/workspace/proj", ReadOnlyRoot: tc.ro, Policy: tc.policy,
				Limits: sandbox.Limits{MemoryMB: 256, DiskMB: 512, FileSizeMB: 8}, Owner: "owner-" + tc.name,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Close(context.Background()) })
			name := sb.(*Sandbox).Name()
			p, err := r.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkPod(t, p, tc.ro, "owner-"+tc.name)

			np, err := r.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the sandbox's NetworkPolicy: %v", err)
			}
			checkPolicy(t, np, p, tc.policy.Network)

			// The report says what applies.
			rep := sb.Report()
			if rep.Rung != Name || rep.Isolation != sandbox.LevelContainer || !slices.Equal(rep.Capabilities, sandbox.ContainerCapabilities) {
				t.Errorf("report: rung %s isolation %s caps %v", rep.Rung, rep.Isolation, rep.Capabilities)
			}
			// What the kernel gives root in the pod: Docker's set, no more.
			res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "grep CapEff /proc/self/status | cut -f2; grep NoNewPrivs /proc/self/status | cut -f2; grep Seccomp: /proc/self/status | cut -f2; ls /var/run/secrets/kubernetes.io 2>&1; env | grep -c _SERVICE_HOST"}})
			if err != nil {
				t.Fatal(err)
			}
			lines := splitLines(string(res.Stdout))
			if len(lines) < 5 {
				t.Fatalf("probe output %q stderr %q", res.Stdout, res.Stderr)
			}
			if got := sandboxtest.CapNames(t, lines[0]); !slices.Equal(got, sandbox.ContainerCapabilities) {
				t.Errorf("root's effective capabilities in the pod %v; want %v", got, sandbox.ContainerCapabilities)
			}
			if lines[1] != "1" || lines[2] != "2" {
				t.Errorf("NoNewPrivs %s Seccomp %s; want 1 and 2 (filter)", lines[1], lines[2])
			}
			if lines[4] != "0" {
				t.Errorf("service links in the environment: %s variables", lines[4])
			}
		})
	}
}

func checkPod(t *testing.T, p *corev1.Pod, ro bool, owner string) {
	t.Helper()
	s := p.Spec
	isFalse := func(b *bool) bool { return b != nil && !*b }
	for _, f := range []struct {
		what string
		ok   bool
	}{
		{"automountServiceAccountToken: false", isFalse(s.AutomountServiceAccountToken)},
		{"enableServiceLinks: false", isFalse(s.EnableServiceLinks)},
		{"hostNetwork/hostPID/hostIPC: false", !s.HostNetwork && !s.HostPID && !s.HostIPC},
		{"restartPolicy: Never", s.RestartPolicy == corev1.RestartPolicyNever},
		{"terminationGracePeriodSeconds: 0", s.TerminationGracePeriodSeconds != nil && *s.TerminationGracePeriodSeconds == 0},
		{"pod seccompProfile RuntimeDefault", s.SecurityContext != nil && s.SecurityContext.SeccompProfile != nil && s.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"dnsPolicy None, nameserver 127.0.0.1 only", s.DNSPolicy == corev1.DNSNone && s.DNSConfig != nil && slices.Equal(s.DNSConfig.Nameservers, []string{"127.0.0.1"}) && len(s.DNSConfig.Searches) == 0},
		{"no runtimeClassName (none asked)", s.RuntimeClassName == nil},
		{"QoS Guaranteed", p.Status.QOSClass == corev1.PodQOSGuaranteed},
		{"labels", p.Labels[LabelManagedBy] == "evalsi" && p.Labels[LabelPool] == "test" && p.Labels[LabelSandbox] != "" && p.Labels[LabelOwner] == OwnerHash(owner)},
		{"owner annotation", p.Annotations[AnnotationOwner] == owner},
		{"no service account volume", !slices.ContainsFunc(s.Volumes, func(v corev1.Volume) bool { return v.Projected != nil || v.Secret != nil })},
		{"no hostPath volumes", !slices.ContainsFunc(s.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil })},
	} {
		if !f.ok {
			t.Errorf("stored pod: want %s; spec %+v", f.what, s)
		}
	}
	if len(s.Containers) != 1 || len(s.InitContainers) != 1 {
		t.Fatalf("containers %d init %d; want 1 and 1", len(s.Containers), len(s.InitContainers))
	}
	want := map[string]corev1.ResourceList{
		"limits": {corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceEphemeralStorage: resource.MustParse("512Mi")},
	}
	for _, ctr := range append(append([]corev1.Container{}, s.InitContainers...), s.Containers...) {
		sc := ctr.SecurityContext
		if sc == nil {
			t.Errorf("container %s: no securityContext", ctr.Name)
			continue
		}
		wantCaps := []corev1.Capability(nil)
		wantRO := true
		if ctr.Name == containerSandbox {
			wantCaps, wantRO = containerCaps(), ro
		}
		for _, f := range []struct {
			what string
			ok   bool
		}{
			{"capabilities drop [ALL]", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"})},
			{"capabilities add: exactly the docker rung's set", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Add, wantCaps)},
			{"privileged: false", isFalse(sc.Privileged)},
			{"allowPrivilegeEscalation: false", isFalse(sc.AllowPrivilegeEscalation)},
			{"readOnlyRootFilesystem as asked", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem == wantRO},
			{"seccompProfile RuntimeDefault", sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
			{"procMount Default", sc.ProcMount != nil && *sc.ProcMount == corev1.DefaultProcMount},
			{"runAsUser 0 (the helper switches users)", sc.RunAsUser != nil && *sc.RunAsUser == 0},
			{"requests = limits", ctr.Resources.Requests.Memory().Equal(*ctr.Resources.Limits.Memory()) && ctr.Resources.Requests.Cpu().Equal(*ctr.Resources.Limits.Cpu()) && ctr.Resources.Requests.StorageEphemeral().Equal(*ctr.Resources.Limits.StorageEphemeral())},
			{"limits memory 256Mi cpu 500m ephemeral-storage 512Mi", ctr.Resources.Limits.Memory().Equal(want["limits"][corev1.ResourceMemory]) && ctr.Resources.Limits.Cpu().Equal(want["limits"][corev1.ResourceCPU]) && ctr.Resources.Limits.StorageEphemeral().Equal(want["limits"][corev1.ResourceEphemeralStorage])},
			{"no env (commands get theirs over exec)", len(ctr.Env) == 0 && len(ctr.EnvFrom) == 0},
		} {
			if !f.ok {
				t.Errorf("container %s: want %s; securityContext %+v resources %+v", ctr.Name, f.what, sc, ctr.Resources)
			}
		}
	}
	main := s.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range main.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts[helper.Dir]; !ok || !m.ReadOnly {
		t.Errorf("helper mount %s: %+v; want read-only", helper.Dir, m)
	}
	for _, d := range []string{"/workspace/proj", "/tmp"} {
		if _, ok := mounts[d]; ok != ro {
			t.Errorf("emptyDir at %s mounted %v; want %v (read-only root only)", d, ok, ro)
		}
	}
}

func checkPolicy(t *testing.T, np *netv1.NetworkPolicy, p *corev1.Pod, network string) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
		t.Errorf("policy selector %v does not select the pod %v (%v)", np.Spec.PodSelector, p.Labels, err)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
		t.Errorf("policy types %v ingress %v; want Ingress+Egress and no ingress rule", np.Spec.PolicyTypes, np.Spec.Ingress)
	}
	switch network {
	case sandbox.NetworkDeny:
		if len(np.Spec.Egress) != 0 {
			t.Errorf("network deny: egress rules %+v; want none", np.Spec.Egress)
		}
	default:
		e := np.Spec.Egress
		if len(e) != 1 || len(e[0].To) != 1 || e[0].To[0].IPBlock == nil || e[0].To[0].IPBlock.CIDR != "10.99.0.7/32" ||
			len(e[0].To[0].IPBlock.Except) != 0 || e[0].To[0].PodSelector != nil || e[0].To[0].NamespaceSelector != nil ||
			len(e[0].Ports) != 1 || e[0].Ports[0].Port == nil || e[0].Ports[0].Port.IntValue() != 3128 || *e[0].Ports[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("network %s: egress %+v; want only TCP to 10.99.0.7:3128", network, e)
		}
	}
}

// TestCloseRemovesPodAndPolicy: Close deletes both and waits; it is
// idempotent.
func TestCloseRemovesPodAndPolicy(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	r := newTestRung(t, c, ns, nil)
	ctx := t.Context()
	sb, err := r.Create(ctx, sandbox.Config{Image: testImage, Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
	if err != nil {
		t.Fatal(err)
	}
	name := sb.(*Sandbox).Name()
	for i := range 2 {
		if err := sb.Close(ctx); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if _, err := r.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s after Close: %v; want not found", name, err)
	}
	if _, err := r.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("NetworkPolicy %s after Close: %v; want not found", name, err)
	}
}

// TestSweep: the Sweeper removes the pool's pods whose owner is dead, and
// leaves a live owner's and another pool's.
func TestSweep(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	r := newTestRung(t, c, ns, nil)
	other := newTestRung(t, c, ns, func(o *Options) { o.Pool = "other" })
	ctx := t.Context()
	mk := func(r *Rung, owner string) string {
		sb, err := r.Create(ctx, sandbox.Config{Image: testImage, Owner: owner, Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb.(*Sandbox).Name()
	}
	dead, live, otherPool := mk(r, "dead-engine"), mk(r, "live-engine"), mk(other, "dead-engine")
	// A policy whose pod never came (its engine died between the creates).
	lone := "evalsi-0123456789ab"
	np, err := r.networkPolicy(lone, "0123456789ab", sandbox.Config{Owner: "dead-engine", Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := r.Sweep(ctx, func(owner string) bool { return owner == "dead-engine" })
	if err != nil || n != 2 {
		t.Fatalf("Sweep: %d, %v; want 2 (the dead owner's pod and lone policy)", n, err)
	}
	if _, err := r.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, lone, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dead owner's lone NetworkPolicy after Sweep: %v; want gone", err)
	}
	for _, tc := range []struct {
		name string
		gone bool
	}{{dead, true}, {live, false}, {otherPool, false}} {
		_, perr := r.cs.CoreV1().Pods(ns).Get(ctx, tc.name, metav1.GetOptions{})
		_, nerr := r.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, tc.name, metav1.GetOptions{})
		if apierrors.IsNotFound(perr) != tc.gone || apierrors.IsNotFound(nerr) != tc.gone {
			t.Errorf("pod %s after Sweep: pod %v policy %v; want gone=%v", tc.name, perr, nerr, tc.gone)
		}
	}
}

// TestProbeRefusesWithoutRights: an identity without RBAC rights is told
// what it lacks.
func TestProbeRefusesWithoutRights(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	r, err := New(Options{Config: c.UserConfig(t, "nobody"), Namespace: ns, HelperImage: helperImage})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Probe(t.Context())
	if p.Works {
		t.Fatalf("probe works for an identity with no rights")
	}
	t.Logf("probe: %s", p.Reason)
	if ok := newTestRung(t, c, ns, nil).Probe(t.Context()); !ok.Works {
		t.Errorf("admin probe: %s", ok.Reason)
	}
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

// TestHelperKilledFromInside: a command (root inside) that kills its own
// exec helper gets a result, as a killed docker exec does, not an error
// of the sandbox; what it left running is killed all the same (pid 1 kills
// the orphans a dead helper leaves), and the sandbox keeps working.
func TestHelperKilledFromInside(t *testing.T) {
	c := cluster(t)
	r := newTestRung(t, c, c.Namespace(t), nil)
	sb, err := r.Create(t.Context(), sandbox.Config{Image: testImage, Workdir: "/w", Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "setsid sleep 300 & echo $! > left.pid; sleep 0.2; kill -9 $PPID; sleep 5"}})
	if err != nil {
		t.Fatalf("a command that kills its helper: %v; want a result", err)
	}
	if res.ExitCode == 0 {
		t.Errorf("exit 0 after the helper was killed: %+v", res)
	}
	for i := 0; ; i++ {
		out, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "kill -0 $(cat left.pid) 2>/dev/null && echo alive || echo gone"}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(out.Stdout)) == "gone" {
			break
		}
		if i == 50 {
			t.Fatalf("the process the command left is still running after its helper was killed")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCreateFailsCleanly: an image the node cannot run fails Create with
// the kubelet's reason, and leaves neither pod nor NetworkPolicy behind.
func TestCreateFailsCleanly(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	r := newTestRung(t, c, ns, nil)
	_, err := r.Create(t.Context(), sandbox.Config{Image: "evalsi.test/no-such-image:1", Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("Create from an image the node lacks: %v; want an error naming ErrImageNeverPull", err)
	}
	pods, err := r.cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left: %d, %v", len(pods.Items), err)
	}
	pols, err := r.cs.NetworkingV1().NetworkPolicies(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pols.Items) != 0 {
		t.Errorf("NetworkPolicies left: %d, %v", len(pols.Items), err)
	}
}
