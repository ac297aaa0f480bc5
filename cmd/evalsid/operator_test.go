package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOperatorUsage(t *testing.T) {
	for _, args := range [][]string{{"operator", "extra"}, {"operator", "--no-such-flag"}} {
		var errb bytes.Buffer
		if code := run(context.Background(), args, io.Discard, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s", args, code, errb.String())
		}
	}
	var errb bytes.Buffer
	if code := run(context.Background(), []string{"operator", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, io.Discard, &errb); code != 1 || !strings.Contains(errb.String(), "finding the cluster") {
		t.Errorf("a missing kubeconfig: exit %d\n%s", code, errb.String())
	}
}

func operatorFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The operator serves /healthz, /readyz and /metrics; it is alive but not
// ready while it cannot reach its cluster (its caches cannot fill), and it
// stops when its context ends. (k8s/controller's tests run it against a
// real apiserver, where /readyz turns ready.)
func TestOperatorProbesAndMetrics(t *testing.T) {
	dead := operatorFreeAddr(t) // nothing listens here
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	conf := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://" + dead + "\", insecure-skip-tls-verify: true}}]\n" +
		"users: [{name: u, user: {token: not-a-secret}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics, health := operatorFreeAddr(t), operatorFreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb syncBuffer
	go func() {
		done <- run(ctx, []string{"operator", "--kubeconfig", kc, "--metrics-listen", metrics, "--health-listen", health}, io.Discard, &errb)
	}()
	get := func(url string) (int, string, error) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, _, err := get("http://" + health + "/healthz")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered 200 (%d, %v)\n%s", code, err, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body, err := get("http://" + health + "/readyz"); err != nil || code == http.StatusOK {
		t.Errorf("/readyz with no reachable cluster: %d %v %s", code, err, body)
	}
	code, body, err := get("http://" + metrics + "/metrics")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "# TYPE") {
		t.Errorf("/metrics: %d %v\n%.500s", code, err, body)
	}
	cancel()
	select {
	case c := <-done:
		if c != 0 {
			t.Errorf("the operator exited %d when stopped\n%s", c, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the operator did not stop with its context")
	}
	if strings.Contains(errb.String(), "not-a-secret") {
		t.Error("the operator logged the kubeconfig's token")
	}
}

// syncBuffer is a bytes.Buffer the operator's goroutines may write while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
