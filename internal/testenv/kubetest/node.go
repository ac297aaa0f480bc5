package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// node is the cluster's one node: a private containerd (own root, state and
// socket, so the Docker engine's is left alone) and a kubelet.
type node struct {
	dir      string // <cluster>/node
	socket   string // containerd's
	nodeName string
	nodeIP   string
}

// pauseImage is the pods' sandbox image, a tiny Go program built at start.
const pauseImage = "evalsi.test/kubetest-pause:1"

// cniBinDir holds Debian's containernetworking-plugins.
const cniBinDir = "/usr/lib/cni"

// nodeMissing says why this machine cannot run a node, or "".
func nodeMissing() string {
	if os.Geteuid() != 0 {
		return "a node (containerd, kubelet) needs root"
	}
	for _, b := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2", "ip", "go"} {
		if _, err := exec.LookPath(b); err != nil {
			return "no " + b + " on PATH; apt-get install containerd runc iproute2 (.ci/setup)"
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			return "no CNI plugin " + p + " in " + cniBinDir + "; apt-get install containernetworking-plugins (.ci/setup)"
		}
	}
	return ""
}

func (c *Cluster) startNode() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	n := &node{
		dir:      filepath.Join(c.dir, "node"),
		nodeName: c.slot.nodeName(),
		// The node's address is its bridge's: the kubelet refuses a
		// loopback node IP, and the apiserver reaches the kubelet there
		// without leaving the machine.
		nodeIP: c.slot.gateway(),
	}
	n.socket = filepath.Join(n.dir, "containerd.sock")
	for _, d := range []string{"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volume-plugins", "opt", "runc", "images"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			return err
		}
	}
	if err := c.makeBridge(ctx, n); err != nil {
		return err
	}
	if err := writeCNIConfig(n, c.slot); err != nil {
		return err
	}
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	c.node = n
	pauseRoot, err := buildPause(ctx, filepath.Join(n.dir, "images", "pause"))
	if err != nil {
		return err
	}
	if err := c.importImage(ctx, pauseImage, pauseRoot, []string{"/pause"}); err != nil {
		return err
	}
	return c.startKubelet(ctx, n)
}

// makeBridge makes the cluster's bridge with the gateway address up front:
// the kubelet needs its node IP before the first pod makes the CNI plugin
// create the bridge (the plugin adopts an existing one).
func (c *Cluster) makeBridge(ctx context.Context, n *node) error {
	br := c.slot.bridge()
	if err := run(ctx, "ip", "link", "add", br, "type", "bridge"); err != nil {
		return fmt.Errorf("making the cluster's bridge: %w", err)
	}
	if err := run(ctx, "ip", "addr", "add", n.nodeIP+"/24", "dev", br); err != nil {
		return fmt.Errorf("addressing the cluster's bridge: %w", err)
	}
	if err := run(ctx, "ip", "link", "set", br, "up"); err != nil {
		return fmt.Errorf("bringing the cluster's bridge up: %w", err)
	}
	return nil
}

// writeCNIConfig gives pods an address on the cluster's bridge and a route
// to its subnet only: no default route and no masquerade, so a pod reaches
// other pods and the host's bridge address, never an outside address.
func writeCNIConfig(n *node, s slot) error {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       s.bridge(),
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      s.bridge(),
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": s.subnet(), "gateway": s.gateway()}}},
				"dataDir": filepath.Join(n.dir, "cni", "ipam"),
			},
		}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "cni", "net.d", "10-kubetest.conflist"), b, 0o644)
}

func (c *Cluster) startContainerd(ctx context.Context, n *node) error {
	d := func(p string) string { return strconv.Quote(filepath.Join(n.dir, p)) }
	// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and without
	// it every sandbox fails ("can't get final child's PID from pipe").
	// netns_mounts_under_state_dir and the runc Root keep the pods' network
	// namespaces and runc's state under the cluster's directory.
	config := `version = 2
root = ` + d("containerd/root") + `
state = ` + d("containerd/state") + `
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = ` + strconv.Quote(n.socket) + `

[plugins."io.containerd.internal.v1.opt"]
  path = ` + d("opt") + `

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + pauseImage + `"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = ` + d("runc") + `
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "` + cniBinDir + `"
    conf_dir = ` + d("cni/net.d") + `
`
	path := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := c.spawn("containerd", "containerd", "--config", path)
	if err != nil {
		return err
	}
	return p.waitReady(ctx, func(ctx context.Context) error {
		return run(ctx, "ctr", "--address", n.socket, "version")
	})
}

func (c *Cluster) startKubelet(ctx context.Context, n *node) error {
	pk := c.pki
	clientCfg := filepath.Join(n.dir, "kubelet.kubeconfig")
	// The Node authorizer knows a kubelet by this name and group.
	if err := c.writeKubeconfig(clientCfg, "kubelet", "system:node:"+n.nodeName, []string{"system:nodes"}); err != nil {
		return err
	}
	servingCert, servingKey, err := pk.issueFiles("kubelet-serving", "system:node:"+n.nodeName, []string{"system:nodes"},
		n.nodeIP, "127.0.0.1", n.nodeName)
	if err != nil {
		return err
	}
	// The kubelet refuses a cgroup root that does not exist.
	for _, h := range cgroupHierarchies() {
		if err := os.MkdirAll(filepath.Join(h, c.slot.cgroupRoot()), 0o755); err != nil {
			return fmt.Errorf("making the node's cgroup in %s: %w", h, err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	cfg := map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"address":            n.nodeIP,
		"port":               ports[0],
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        ports[1],
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": pk.caFile()},
		},
		"authorization":     map[string]any{"mode": "Webhook"},
		"tlsCertFile":       servingCert,
		"tlsPrivateKeyFile": servingKey,
		"cgroupDriver":      "cgroupfs",
		"cgroupRoot":        c.slot.cgroupRoot(),
		"failSwapOn":        false,
		// This machine's cgroups are v1 (hybrid); 1.37 refuses v1 unless told.
		"failCgroupV1":             false,
		"containerRuntimeEndpoint": "unix://" + n.socket,
		"podLogsDir":               filepath.Join(n.dir, "pod-logs"),
		"volumePluginDir":          filepath.Join(n.dir, "volume-plugins"),
		"resolvConf":               "",
		"makeIPTablesUtilChains":   false,
		// A test machine's disk may be fuller than production's
		// thresholds; imported images must never be collected.
		"evictionHard": map[string]string{
			"memory.available": "10Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"registerNode":                true,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(n.dir, "kubelet-config.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return err
	}
	kubelet, err := c.spawn("kubelet", filepath.Join(c.BinDir, "kubelet"),
		"--config="+cfgPath, "--kubeconfig="+clientCfg,
		"--root-dir="+filepath.Join(n.dir, "kubelet"), "--cert-dir="+filepath.Join(n.dir, "kubelet", "pki"),
		"--hostname-override="+n.nodeName, "--node-ip="+n.nodeIP)
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	err = kubelet.waitReady(ctx, func(ctx context.Context) error {
		node, err := admin.CoreV1().Nodes().Get(ctx, n.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s not ready: %s", n.nodeName, cond.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition yet", n.nodeName)
	})
	if err != nil {
		return fmt.Errorf("%w\n(containerd's log: %s)", err, filepath.Join(c.dir, "logs", "containerd.log"))
	}
	return nil
}

// buildPause builds the sandbox image's one program: it waits for SIGTERM
// or SIGINT, as a pod's sandbox must. It returns the root filesystem.
func buildPause(ctx context.Context, dir string) (string, error) {
	const src = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
`
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "pause.go"), []byte(src), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(rootfs, "pause"), "pause.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the pause program: %v\n%s", err, out)
	}
	return rootfs, nil
}

// waitTimeout is how long a test helper waits for the cluster to act.
const waitTimeout = 2 * time.Minute
