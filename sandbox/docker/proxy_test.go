package docker

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
)

// TestAllowlistProxyForms reaches an allowed host through the in-container
// forwarder with the proxy given as a unix socket and as a TCP address (the
// rung then bridges it), as root and as an unprivileged user.
func TestAllowlistProxyForms(t *testing.T) {
	requireDocker(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from upstream") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	allowed := "allowed.test:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	proxy := sandboxtest.StartProxy(t, map[string]string{allowed: ln.Addr().String()})

	for _, tc := range []struct {
		name, addr, user string
	}{
		{"unix socket as root", proxy.UnixAddr, ""},
		{"tcp address as nobody", proxy.TCPAddr, "65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, sandbox.Config{
				User:     tc.user,
				StateDir: t.TempDir(),
				Policy:   sandbox.Policy{Network: sandbox.NetworkAllowlist, AllowHosts: []string{"allowed.test"}, ProxyAddr: tc.addr},
			})
			if rep := sb.Report(); rep.Network != sandbox.NetworkAllowlist || rep.ProxyAddr != tc.addr {
				t.Errorf("report network %q proxy %q, want allowlist %q", rep.Network, rep.ProxyAddr, tc.addr)
			}
			good := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", sandboxtest.ConnectScript + allowed}})
			if good.ExitCode != 0 || !strings.Contains(string(good.Stdout), "hello from upstream") {
				t.Fatalf("allowed host through the proxy: exit %d stdout %q stderr %q", good.ExitCode, good.Stdout, good.Stderr)
			}
			bad := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", sandboxtest.ConnectScript + "evil.test:443"}})
			if bad.ExitCode != 3 || !strings.Contains(string(bad.Stdout), "403") {
				t.Fatalf("refused host: exit %d stdout %q stderr %q, want exit 3 and 403", bad.ExitCode, bad.Stdout, bad.Stderr)
			}
			// The forwarder is the keeper: it survives the sweep after each
			// command, so a second request still works.
			again := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", sandboxtest.ConnectScript + allowed}})
			if again.ExitCode != 0 {
				t.Fatalf("second request: exit %d stderr %q", again.ExitCode, again.Stderr)
			}
			// A snapshot keeps neither the keeper's user nor the proxy
			// variables, which would point restored sandboxes at nothing.
			layer, err := sb.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			r := requireDocker(t)
			t.Cleanup(func() { r.RemoveLayer(context.Background(), layer) })
			cli, _ := r.Client()
			in, err := cli.ImageInspect(context.Background(), layer.Ref)
			if err != nil {
				t.Fatal(err)
			}
			// The image's user (none: root), not the keeper's or the sandbox's.
			if want := "0"; in.Config.User != want || !slices.Contains(in.Config.Env, "HTTPS_PROXY=") {
				t.Errorf("snapshot image user %q env %q; want user %q and HTTPS_PROXY emptied", in.Config.User, in.Config.Env, want)
			}
		})
	}
	log := strings.Join(proxy.Log(), ", ")
	if !strings.Contains(log, "refused evil.test:443") || !strings.Contains(log, "allowed "+allowed) {
		t.Errorf("proxy log %q lacks the allowed and refused attempts", log)
	}
}
