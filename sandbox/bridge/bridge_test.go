package bridge

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// echoServer answers each line with "echo: " and the line, on loopback.
func echoServer(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
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
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Write([]byte("echo: " + line))
			}()
		}
	}()
	return ln
}

func roundTrip(t *testing.T, sock string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello\n"))
	got, _ := bufio.NewReader(c).ReadString('\n')
	return got
}

func TestRelay(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "egress.sock")
	echoServer(t, "unix", own)
	if err := os.Chmod(own, 0o700); err != nil {
		t.Fatal(err)
	}
	tcp := echoServer(t, "tcp4", "127.0.0.1:0")
	for _, tc := range []struct{ name, addr string }{
		{"tcp proxy", tcp.Addr().String()},
		{"unix proxy", "unix:" + own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".sock")
			ln, err := Relay(tc.addr, sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			// Any uid may connect: the sandbox's user is not the proxy's.
			if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o666 {
				t.Fatalf("socket mode %v, %v; want 0666", st.Mode(), err)
			}
			if got := roundTrip(t, sock); got != "echo: hello\n" {
				t.Fatalf("through the relay: %q", got)
			}
		})
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o644)
	for _, tc := range []struct{ addr, want string }{
		{"", "proxy_addr is empty"},
		{"unix:" + plain, "is not a unix socket"},
		{"unix:" + filepath.Join(dir, "missing"), "no such file"},
		{"no-port", "want unix:/path or host:port"},
	} {
		if _, err := Relay(tc.addr, filepath.Join(dir, "x.sock")); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Relay(%q) error %v, want one containing %q", tc.addr, err, tc.want)
		}
	}
}

func TestProxyEnv(t *testing.T) {
	env := ProxyEnv(nil)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		if env[k] != "http://"+Listen {
			t.Errorf("%s = %q, want http://%s", k, env[k], Listen)
		}
	}
	if env["NO_PROXY"] == "" {
		t.Error("NO_PROXY unset: loopback traffic would be sent to the proxy")
	}
}
