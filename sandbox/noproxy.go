package sandbox

import (
	"net"
	"strings"
)

// NoProxy is the NO_PROXY value for a sandbox whose traffic goes through the
// egress proxy with these allowed hosts (none under network: allow). The
// sandbox's own loopback stays direct, as in a container with no proxy
// variables: a task's service on localhost, or a test server the agent
// starts, must not go through the proxy, which would refuse it. own are
// further names of the sandbox's loopback (its hostname). The exception is
// an allowed host that is a loopback address: then the spec means the
// worker's loopback (a model server next to the engine, say), which only
// the proxy can reach, so nothing bypasses it.
func NoProxy(allowHosts []string, own ...string) string {
	for _, h := range allowHosts {
		host := h
		if hh, _, err := net.SplitHostPort(h); err == nil {
			host = hh
		}
		host = strings.Trim(host, "[]")
		if strings.EqualFold(host, "localhost") {
			return ""
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return ""
		}
	}
	return strings.Join(append([]string{"localhost", "127.0.0.1", "::1", "127.0.1.1"}, own...), ",")
}
