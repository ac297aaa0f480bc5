// Package s3test runs a real S3 server for a test: versitygw (the binary
// scripts/build-versitygw.sh builds and caches) with a posix backend in the
// test's temporary directory, on a free 127.0.0.1 port, with root
// credentials made for the test and one bucket created. Nothing listens on
// another address. Test support only.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
)

// Region is the region the server is started with.
const Region = "us-east-1"

// Server is a running versitygw and the bucket made on it.
type Server struct {
	// Endpoint is http://127.0.0.1:PORT; path-style addressing.
	Endpoint string
	Bucket   string
	// AccessKey and SecretKey are its root user's, random per test.
	AccessKey, SecretKey string
	// Root is the posix backend's directory: <Root>/<Bucket>/<key> is an
	// object's file (tests corrupt objects through it).
	Root string
}

// Start runs versitygw until the test ends. A machine without the cached
// binary reports the facility missing (a failure under EVALSI_STRICT=1).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	root, iam := filepath.Join(dir, "data"), filepath.Join(dir, "iam")
	for _, d := range []string{root, iam} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{Bucket: "evalsi-test", AccessKey: "AK" + randHex(t, 9), SecretKey: randHex(t, 20), Root: root}
	port := freePort(t)
	s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"--port", fmt.Sprintf("127.0.0.1:%d", port), "--iam-dir", iam, "--region", Region, "--quiet", "posix"}
	// The posix backend keeps object metadata in xattrs; where the file
	// system has none, in a sidecar directory.
	if !xattrsWork(root) {
		sidecar := filepath.Join(dir, "sidecar")
		if err := os.MkdirAll(sidecar, 0o700); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--sidecar", sidecar)
	}
	args = append(args, root)
	logs := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// The credentials go in the environment, not argv (which ps shows).
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir,
		"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("versitygw's log:\n%s", logs.String())
		}
	})
	s.waitReady(t, exited, logs)
	return s
}

// Client is an S3 client for the server (path-style, its root user).
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// Put writes an object (test setup).
func (s *Server) Put(t testing.TB, key string, data []byte) {
	t.Helper()
	_, err := s.Client().PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("putting s3://%s/%s: %v", s.Bucket, key, err)
	}
}

// Keys lists the bucket's keys under prefix.
func (s *Server) Keys(t testing.TB, prefix string) []string {
	t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatalf("listing s3://%s/%s: %v", s.Bucket, prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// waitReady creates the bucket once the server answers, or fails when it
// exits first. The bound is for a server that never comes up.
func (s *Server) waitReady(t testing.TB, exited <-chan error, logs *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client()
	for {
		_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
		if err == nil {
			return
		}
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Fatalf("creating bucket %s on versitygw: %v; its log:\n%s", s.Bucket, err, logs.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("versitygw exited before it was ready (%v); its log:\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("versitygw was not ready after 2 minutes; its log:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// xattrsWork reports whether dir's file system takes user xattrs.
func xattrsWork(dir string) bool {
	return unix.Setxattr(dir, "user.evalsi-probe", []byte("1"), 0) == nil
}

// binary finds the cached versitygw through the build script's --cached
// mode: building it downloads modules, which a test must not do.
func binary(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(moduleRoot(t), "scripts", "build-versitygw.sh"), "--cached")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		testenv.Missing(t, "versitygw", "the binary is not built (run bash scripts/build-versitygw.sh; .ci/setup does): "+err.Error()+"\n"+stderr.String())
	}
	bin := strings.TrimSpace(string(out))
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("build-versitygw.sh printed %q, which is not an executable", bin)
	}
	return bin
}

func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return strings.ToUpper(hex.EncodeToString(b))
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// syncBuffer collects versitygw's output, written by exec's copier while a
// failing test may read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
