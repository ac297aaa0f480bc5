package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A proxy switches phases: deny (no hosts), then an allowlist, then deny
// again; each attempt is decided by the policy set when it is made.
func TestSetPolicySwitchesWhatGetsThrough(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	p, ev := startProxy(t, Policy{})
	c := client(p, &http.Transport{}, true)
	steps := []struct {
		name   string
		policy *Policy
		want   int
	}{
		{"deny at start", nil, http.StatusForbidden},
		{"allowlist", &Policy{AllowHosts: []string{hostPort(t, srv.URL)}}, http.StatusOK},
		{"deny again", &Policy{}, http.StatusForbidden},
		{"bad policy fails closed", &Policy{AllowHosts: []string{hostPort(t, srv.URL), "no-port"}}, http.StatusForbidden},
	}
	for _, s := range steps {
		if s.policy != nil {
			err := p.SetPolicy(*s.policy)
			if bad := strings.Contains(s.name, "bad"); bad != (err != nil) {
				t.Fatalf("%s: SetPolicy: %v", s.name, err)
			}
		}
		if code, _, _ := get(t, c, srv.URL); code != s.want {
			t.Errorf("%s: GET through the proxy answered %d, want %d", s.name, code, s.want)
		}
	}
	evs := ev.all()
	if len(evs) != len(steps) {
		t.Fatalf("events %+v, want one per attempt", evs)
	}
	if evs[0].Allowed || !strings.Contains(evs[0].Reason, "network: deny") {
		t.Errorf("the deny phase's refusal: %+v", evs[0])
	}
	if !evs[1].Allowed || evs[2].Allowed || evs[3].Allowed {
		t.Errorf("events %+v", evs)
	}
}

// A tunnel opened under one policy does not outlive it: SetPolicy cuts it,
// even when the new policy would allow the same host.
func TestSetPolicyCutsTunnelsOfTheOldPolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	target := ln.Addr().String()
	p, _ := startProxy(t, Policy{AllowHosts: []string{target}})
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprint(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the tunnel: %q %v", line, err)
	}
	if err := p.SetPolicy(Policy{AllowHosts: []string{target}}); err != nil {
		t.Fatal(err)
	}
	// Bounded by a deadline so a regression fails rather than hangs; the
	// cut itself is immediate.
	conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprint(conn, "after\n")
	if line, err := br.ReadString('\n'); err == nil {
		t.Fatalf("the tunnel outlived its policy: read %q", line)
	}
}
