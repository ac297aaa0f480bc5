package sandbox

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strings"
)

// The files Docker writes into every container, which the rungs that make
// their own root (bwrap, landlock) write too, per sandbox.

// NewHostname is 12 random hex digits, as Docker's container id prefix.
// Like Docker (moby's stringid), it never picks 12 decimal digits: glibc
// takes an all-digit name for an address and never looks it up in
// /etc/hosts, so the sandbox's own hostname would not resolve.
func NewHostname() (string, error) { return newHostname(rand.Reader) }

func newHostname(r io.Reader) (string, error) {
	b := make([]byte, 6)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return "", fmt.Errorf("choosing a hostname: %w", err)
		}
		name := hex.EncodeToString(b)
		if strings.ContainsAny(name, "abcdef") {
			return name, nil
		}
	}
}

// EtcHosts is Docker's /etc/hosts for a container without other networks;
// Docker's last line is the container's own address, here 127.0.1.1, since
// the sandbox's only interface is loopback (the hostname still resolves).
func EtcHosts(hostname string) []byte {
	return []byte("127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"ff00::0\tip6-mcastprefix\n" +
		"ff02::1\tip6-allnodes\n" +
		"ff02::2\tip6-allrouters\n" +
		"127.0.1.1\t" + hostname + "\n")
}

// ResolvConf is the host's resolv.conf as Docker derives a container's on
// its default network: loopback nameservers (a host stub resolver,
// unreachable from the sandbox's network namespace) are dropped, and when
// none remains Docker's fallbacks 8.8.8.8 and 8.8.4.4 are used; search and
// options lines stay. Nothing in a network: deny sandbox reaches them,
// which is fine: the file is what a task expects to find.
func ResolvConf(host []byte) []byte {
	var out bytes.Buffer
	servers := 0
	sc := bufio.NewScanner(bytes.NewReader(host))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip := net.ParseIP(strings.SplitN(f[1], "%", 2)[0]); ip != nil && ip.IsLoopback() {
				continue
			}
			servers++
		}
		out.WriteString(line + "\n")
	}
	if servers == 0 {
		out.WriteString("nameserver 8.8.8.8\nnameserver 8.8.4.4\n")
	}
	return out.Bytes()
}
