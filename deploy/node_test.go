package deploy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv/kubetest"
	"evals.si/internal/testenv/servertest"
)

// TestServerPodRunsOnANode proves the hardened server pod of the test
// overlay really runs on a node (Debian's containerd and runc): as uid
// 65532 with a read-only root, every capability dropped and RuntimeDefault
// seccomp it reads its group-readable TLS Secret, opens SQLite in its
// emptyDir and serves HTTPS, and the kubelet's readiness probe on /readyz
// and liveness probe on /healthz pass (the Deployment becomes available).
func TestServerPodRunsOnANode(t *testing.T) {
	c := kubetest.Shared(t, kubetest.Options{Node: true})
	kubectl := filepath.Join(c.BinDir, "kubectl")
	objs := render(t, kubectl, "overlays/test")

	rootfs := t.TempDir()
	bin := filepath.Join(rootfs, "usr", "local", "bin", "evalsid")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(servertest.Evalsid(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, testImage, rootfs)

	dir := t.TempDir()
	keep := func(o object) bool {
		switch o.Kind {
		case "Namespace", "ConfigMap":
			return o.Metadata.Namespace != "evalsi-sandbox"
		case "Deployment", "Service":
			return o.Metadata.Name == "evalsi-server"
		}
		return false
	}
	var manifest strings.Builder
	for _, o := range objs {
		if keep(o) {
			manifest.WriteString("---\n" + o.yaml + "\n")
		}
	}
	mf := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(mf, []byte(manifest.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := kubectlOut(c, "delete", "--ignore-not-found", "--timeout=2m", "-f", mf); err != nil {
			t.Logf("cleaning up: %v\n%s", err, out)
		}
	})
	c.Kubectl(t, "apply", "-f", mf)

	certFile, keyFile := selfSigned(t, dir, "evalsi-server.evalsi.svc")
	c.Kubectl(t, "-n", "evalsi", "create", "secret", "generic", "evalsi-server-tls",
		"--from-file=tls.crt="+certFile, "--from-file=tls.key="+keyFile, "--from-file=ca.crt="+certFile)
	c.Kubectl(t, "-n", "evalsi", "create", "secret", "generic", "evalsi-server",
		"--from-literal=worker-token=worker-token-0123456789abcdef", "--from-literal=operator-token=operator-token-0123456789abcdef")

	if out, err := kubectlOut(c, "-n", "evalsi", "rollout", "status", "deployment/evalsi-server", "--timeout=3m"); err != nil {
		desc, _ := kubectlOut(c, "-n", "evalsi", "describe", "pods")
		logs, _ := kubectlOut(c, "-n", "evalsi", "logs", "deployment/evalsi-server", "--tail=40")
		t.Fatalf("the server pod did not become ready: %v\n%s\n%s\n%s", err, out, desc, logs)
	}
	out := c.Kubectl(t, "-n", "evalsi", "get", "pods", "-l", "app.kubernetes.io/name=evalsi-server",
		"-o", `jsonpath={range .items[*]}{.status.phase} {.status.containerStatuses[0].ready} {.status.containerStatuses[0].restartCount}{"\n"}{end}`)
	if strings.TrimSpace(out) != "Running true 0" {
		t.Errorf("server pod phase/ready/restarts %q, want Running true 0", out)
	}
}

// selfSigned writes a self-signed certificate (its own CA) for name.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name, "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
