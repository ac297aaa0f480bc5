package controller_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/internal/testenv/servertest"
	"evals.si/k8s/apis/v1alpha1"
)

// `evalsid operator` (the binary) on a real apiserver turns ready once its
// watches have synced, serves controller-runtime's metrics, and reconciles:
// a SandboxClass gets its Deployment.
func TestOperatorBinary(t *testing.T) {
	c, cl, ns := cluster(t)
	addr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	metrics, health := addr(), addr()
	start(t, servertest.Evalsid(t), t.TempDir(), "operator", os.Environ(), "operator", "--kubeconfig", c.Kubeconfig,
		"--namespace", ns, "--metrics-listen", metrics, "--health-listen", health)
	get := func(url string) (int, string, error) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	waitFor(t, "/readyz", func() (bool, error) {
		code, _, err := get("http://" + health + "/readyz")
		return code == http.StatusOK, err
	})
	sc := &v1alpha1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: "bin", Namespace: ns},
		Spec: v1alpha1.SandboxClassSpec{Image: "evalsi.test/evalsid:1", TLSSecretName: "bin-tls"}}
	if err := cl.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	waitDeployment(t, cl, ns, "sandboxd-bin")
	waitFor(t, "reconcile metrics", func() (bool, error) {
		code, body, err := get("http://" + metrics + "/metrics")
		return code == http.StatusOK && strings.Contains(body, `controller_runtime_reconcile_total{controller="sandboxclass"`), err
	})
}
