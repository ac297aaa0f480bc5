// Package kubetest gives tests a real Kubernetes: one cluster per test
// binary, built from the real components (Debian's etcd, and
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
// kubectl built by scripts/build-kubernetes.sh), on loopback, with
// certificates made for the run. With Options.Node (root only) it also runs
// a node: a private containerd with runc and a CNI bridge of the cluster's
// own, and a kubelet. Test support only.
//
// A package that uses it calls Main from its TestMain, which starts nothing
// until a test asks, and tears the cluster down when the tests are done:
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//
//	func TestX(t *testing.T) { c := kubetest.Shared(t, kubetest.Options{}); ns := c.Namespace(t); ... }
//
// The binaries are looked up in $EVALSI_CACHE/kubernetes/<Version>/bin
// (default /var/cache/evalsi for root); the tests never build them. Without
// them, or without etcd (or, for a node, without root, containerd, runc and
// the CNI plugins), Shared skips, or fails under EVALSI_STRICT=1.
//
// Leftovers of a test binary that died without Main's cleanup (processes,
// mounts, cgroups, the bridge, files) are swept by the next start: see
// sweep.go.
package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"evals.si/internal/testenv"
)

// Version is the Kubernetes release the tests run, as scripts/build-kubernetes.sh
// builds it by default.
const Version = "v1.37.2"

// startTimeout bounds the start of the control plane, and of the node.
const startTimeout = 3 * time.Minute

// Options choose what runs: the control plane always (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, on loopback, certificates made for
// the run); Node adds a node that runs pods (a private containerd + runc +
// CNI bridge, and a kubelet), as root.
type Options struct{ Node bool }

// Cluster is a running cluster.
type Cluster struct {
	Kubeconfig string       // admin kubeconfig file (system:masters)
	RESTConfig *rest.Config // the same, for client-go / controller-runtime
	BinDir     string       // kubectl and the other binaries

	slot   slot
	dir    string
	pki    *pki
	server string // https://127.0.0.1:port
	procs  []*proc
	node   *node // nil until a test asks for a node
	nsSeq  atomic.Int64
}

var (
	mainCalled atomic.Bool

	mu        sync.Mutex
	shared    *Cluster
	cpErr     error // why the control plane did not start; sticky
	nodeTried bool
	nodeErr   error // why the node did not start; sticky
)

// Main runs the tests and then stops a shared cluster (call from TestMain).
func Main(m *testing.M) {
	mainCalled.Store(true)
	// Interrupted (^C, a CI job's cancel), stop the cluster before dying:
	// the components would die with the binary, but pods and shims would
	// wait for the next start's sweep.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		stopShared(false)
		fmt.Fprintf(os.Stderr, "kubetest: %v: stopped the test cluster\n", sig)
		os.Exit(2)
	}()
	code := m.Run()
	stopShared(code != 0)
	os.Exit(code)
}

// stopShared stops the shared cluster; keepLogs (the tests failed) keeps
// the components' logs for a look.
func stopShared(keepLogs bool) {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		if kept := shared.stop(keepLogs); kept != "" {
			fmt.Fprintf(os.Stderr, "kubetest: the test cluster's logs are kept in %s\n", kept)
		}
		shared = nil
	}
}

// Shared starts, once per test binary, the cluster the options ask for (a
// cluster with a node serves callers that ask for none). It skips the test
// when a facility is missing, and fails it instead under EVALSI_STRICT=1.
// Stopped by Main.
func Shared(t testing.TB, o Options) *Cluster {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("kubetest.Shared needs kubetest.Main: add func TestMain(m *testing.M) { kubetest.Main(m) } to the package's tests")
	}
	bin, err := binDir()
	if err != nil {
		testenv.Missing(t, "Kubernetes "+Version, err.Error())
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		testenv.Missing(t, "etcd", "no etcd on PATH; apt-get install etcd-server (.ci/setup)")
	}
	if o.Node {
		if reason := nodeMissing(); reason != "" {
			testenv.Missing(t, "a Kubernetes node", reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && cpErr == nil {
		shared, cpErr = start(bin)
	}
	if cpErr != nil {
		t.Fatalf("starting the test Kubernetes control plane: %v", cpErr)
	}
	if o.Node {
		if !nodeTried {
			nodeTried = true
			nodeErr = shared.startNode()
		}
		if nodeErr != nil {
			t.Fatalf("starting the test Kubernetes node: %v", nodeErr)
		}
	}
	return shared
}

// binDir finds the binaries scripts/build-kubernetes.sh builds.
func binDir() (string, error) {
	cache := os.Getenv("EVALSI_CACHE")
	if cache == "" {
		if os.Geteuid() == 0 {
			cache = "/var/cache/evalsi"
		} else if d, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(d, "evalsi")
		}
	}
	dir := filepath.Join(cache, "kubernetes", Version, "bin")
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		if fi, err := os.Stat(filepath.Join(dir, c)); err != nil || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("no %s in %s; run bash scripts/build-kubernetes.sh (or .ci/setup)", c, dir)
		}
	}
	return dir, nil
}

// start starts the control plane; on failure it leaves nothing behind.
func start(bin string) (*Cluster, error) {
	s, err := takeSlot()
	if err != nil {
		return nil, err
	}
	c := &Cluster{BinDir: bin, slot: s, dir: s.dir}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.startControlPlane(ctx); err != nil {
		if kept := c.stop(true); kept != "" {
			err = fmt.Errorf("%w\n(all the components' logs are kept in %s)", err, kept)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	for _, d := range []string{"logs", "pki", "etcd"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o700); err != nil {
			return err
		}
	}
	p, err := newPKI(filepath.Join(c.dir, "pki"))
	if err != nil {
		return fmt.Errorf("making the cluster's CA: %w", err)
	}
	c.pki = p
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4]

	// etcd: durability is not under test, fsync off keeps it fast.
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := c.spawn("etcd", "etcd", "--name=default", "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	if err := etcd.waitReady(ctx, httpOK(etcdURL+"/health")); err != nil {
		return err
	}

	pk := c.pki
	servingCert, servingKey, err := pk.issueFiles("apiserver", "kube-apiserver", nil,
		"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if err != nil {
		return err
	}
	kubeletClientCert, kubeletClientKey, err := pk.issueFiles("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return err
	}
	saKey, saPub, err := pk.serviceAccountKey()
	if err != nil {
		return err
	}
	c.server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	apiserver, err := c.spawn("kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		// 1.37 refuses a loopback advertise address with the default
		// endpoint reconciler; nothing here needs the kubernetes
		// service's endpoints.
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(c.dir, "pki", "apiserver-generated"),
		"--tls-cert-file="+servingCert, "--tls-private-key-file="+servingKey,
		"--client-ca-file="+pk.caFile(),
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.218.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--kubelet-client-certificate="+kubeletClientCert, "--kubelet-client-key="+kubeletClientKey,
		"--kubelet-certificate-authority="+pk.caFile(),
		// Without it the apiserver resolves the node's name through the
		// system resolver, off the machine.
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=false")
	if err != nil {
		return err
	}

	c.Kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	if err := c.writeKubeconfig(c.Kubeconfig, "admin", "kubetest-admin", []string{"system:masters"}); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	// Tests create objects in bursts; client-go's default 5 requests a
	// second would make them wait on the client, not the cluster.
	cfg.QPS, cfg.Burst = 200, 400
	c.RESTConfig = cfg
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := apiserver.waitReady(ctx, func(ctx context.Context) error {
		_, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return err
	}

	// The controller-manager and the scheduler as their own users, whom
	// the default RBAC policy grants what they need.
	kcmConfig := filepath.Join(c.dir, "kube-controller-manager.kubeconfig")
	if err := c.writeKubeconfig(kcmConfig, "kube-controller-manager", "system:kube-controller-manager", nil); err != nil {
		return err
	}
	kcm, err := c.spawn("kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"),
		"--kubeconfig="+kcmConfig, "--authentication-kubeconfig="+kcmConfig, "--authorization-kubeconfig="+kcmConfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort),
		"--cert-dir="+filepath.Join(c.dir, "pki", "kcm-generated"),
		"--leader-elect=false",
		"--service-account-private-key-file="+saKey, "--root-ca-file="+pk.caFile(),
		"--use-service-account-credentials",
		"--cluster-signing-cert-file="+pk.caFile(), "--cluster-signing-key-file="+pk.caKeyFile(),
		"--profiling=false")
	if err != nil {
		return err
	}
	schedConfig := filepath.Join(c.dir, "kube-scheduler.kubeconfig")
	if err := c.writeKubeconfig(schedConfig, "kube-scheduler", "system:kube-scheduler", nil); err != nil {
		return err
	}
	sched, err := c.spawn("kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"),
		"--kubeconfig="+schedConfig, "--authentication-kubeconfig="+schedConfig, "--authorization-kubeconfig="+schedConfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
		"--cert-dir="+filepath.Join(c.dir, "pki", "scheduler-generated"),
		"--leader-elect=false", "--profiling=false")
	if err != nil {
		return err
	}
	if err := kcm.waitReady(ctx, httpOK("https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz")); err != nil {
		return err
	}
	if err := sched.waitReady(ctx, httpOK("https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz")); err != nil {
		return err
	}
	// The service-account controller's first act: once "default" has its
	// account, the controller-manager is at work.
	return kcm.waitReady(ctx, func(ctx context.Context) error {
		_, err := admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// writeKubeconfig writes a kubeconfig for a client certificate of user cn in
// groups orgs.
func (c *Cluster) writeKubeconfig(path, name, cn string, orgs []string) error {
	kp, err := c.pki.issue(cn, orgs)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.server, CertificateAuthorityData: c.pki.certPE}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.cert, ClientKeyData: kp.key}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = "kubetest"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// stop tears the cluster down and leaves nothing: the kubelet first (so it
// restarts nothing), then the other components, newest first, then
// whatever of the slot is left (containerd's shims, the pods' processes,
// mounts, cgroups, the bridge, files: sweep). With keepLogs it first moves
// the components' logs out of the way and returns where they are.
func (c *Cluster) stop(keepLogs bool) (kept string) {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].name == "kubelet" {
			c.procs[i].stop()
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	if keepLogs {
		dst := filepath.Join(os.TempDir(), fmt.Sprintf("evalsi-kubetest-logs-%d", os.Getpid()))
		if err := os.Rename(filepath.Join(c.dir, "logs"), dst); err == nil {
			kept = dst
		}
	}
	if err := sweep(c.slot); err != nil {
		fmt.Fprintf(os.Stderr, "kubetest: tearing down the test cluster: %v\n", err)
	}
	c.slot.lock.Close()
	return kept
}

// Kubectl runs kubectl with the admin kubeconfig and returns its combined
// output, failing t on error.
func (c *Cluster) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var nonName = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a fresh namespace for the test (deleted at cleanup) and
// returns its name. It returns once the namespace's default service account
// exists, so pods can be created in it at once.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	if base == "" {
		base = "test"
	}
	name := fmt.Sprintf("%s-%d", base, c.nsSeq.Add(1))
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	for {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return name
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s has no default service account after a minute (is the controller-manager running? its log: %s): %v",
				name, filepath.Join(c.dir, "logs", "kube-controller-manager.log"), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// UserConfig returns a rest.Config authenticated as a user (client
// certificate for CN=user, O=groups) with no rights unless RBAC grants them.
func (c *Cluster) UserConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	kp, err := c.pki.issue(user, groups)
	if err != nil {
		t.Fatalf("issuing a client certificate for %s: %v", user, err)
	}
	return &rest.Config{
		Host:            c.server,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.certPE, CertData: kp.cert, KeyData: kp.key},
		QPS:             c.RESTConfig.QPS,
		Burst:           c.RESTConfig.Burst,
	}
}

// LogDir is where the components' logs are, for a test's failure message.
func (c *Cluster) LogDir() string { return filepath.Join(c.dir, "logs") }
