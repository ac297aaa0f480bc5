package remote_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/egress"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/sandbox/remote"
)

// forwarder relays loopback TCP to the pool and can cut every connection
// it holds, as a network blip or a restarted load balancer would.
type forwarder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func forward(t *testing.T, to string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	t.Cleanup(func() { ln.Close(); f.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return f
}

func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// A proxy's event stream that breaks is asked for again from the last
// event received: an attempt made while it was down is still reported,
// and none is reported twice.
func TestProxyEventsSurviveABrokenStream(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{})
	f := forward(t, run.Addr)
	cert := pooltest.Issue(t, run.ClientCA, "blip", false)
	p, err := remote.Dial(t.Context(), remote.Options{Address: f.ln.Addr().String(), TLS: run.ClientTLS(&cert)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	var mu sync.Mutex
	var hosts []string
	got := make(chan struct{}, 16)
	h, err := p.Egress().StartProxy(t.Context(), egress.Policy{AllowHosts: []string{"allowed.invalid:80"}}, func(ev egress.Event) {
		mu.Lock()
		hosts = append(hosts, ev.Host)
		mu.Unlock()
		got <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Rung().Create(t.Context(), sandbox.Config{Workdir: "/workspace",
		Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist, AllowHosts: []string{"allowed.invalid:80"}, ProxyAddr: h.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	attempt := func(host string) {
		t.Helper()
		// Through the sandbox's HTTP proxy, which refuses the host.
		py := "import urllib.request,sys\ntry:\n urllib.request.urlopen('http://" + host + "/', timeout=20)\nexcept Exception as e:\n print(e)\n"
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", py}})
		var pe *remote.PoolError
		if errors.As(err, &pe) {
			// The exec's own connection was cut too (a POST is not sent
			// again by net/http); what is tested is the event stream.
			res, err = sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", py}})
		}
		if err != nil {
			t.Fatalf("asking for %s: %+v %v", host, res, err)
		}
	}
	waitEvent := func(what string) {
		t.Helper()
		select {
		case <-got:
		case <-time.After(time.Minute):
			t.Fatalf("no event for %s", what)
		}
	}
	attempt("first.invalid")
	waitEvent("the first attempt")
	f.cut() // the event stream (and every other connection) breaks
	attempt("second.invalid")
	waitEvent("the attempt made after the stream broke")
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(hosts, " ") != "first.invalid second.invalid" {
		t.Errorf("events for hosts %q; want first.invalid then second.invalid, once each", hosts)
	}
}
