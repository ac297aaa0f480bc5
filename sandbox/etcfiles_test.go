package sandbox

import (
	"bytes"
	"testing"
)

func TestResolvConf(t *testing.T) {
	for _, tc := range []struct{ name, host, want string }{
		{"kept", "nameserver 10.0.0.2\nsearch corp.example\noptions ndots:2\n", "nameserver 10.0.0.2\nsearch corp.example\noptions ndots:2\n"},
		{"stub only, no final newline", "# by NetworkManager\nnameserver 127.0.0.53\nsearch corp.example", "# by NetworkManager\nsearch corp.example\nnameserver 8.8.8.8\nnameserver 8.8.4.4\n"},
		{"loopback stub and options", "nameserver 127.0.0.53\noptions edns0\nsearch example.com\n", "options edns0\nsearch example.com\nnameserver 8.8.8.8\nnameserver 8.8.4.4\n"},
		{"mixed", "nameserver ::1\nnameserver 127.1.2.3\nnameserver 2001:db8::1\nnameserver 127.0.0.1\n", "nameserver 2001:db8::1\n"},
		{"none", "", "nameserver 8.8.8.8\nnameserver 8.8.4.4\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(ResolvConf([]byte(tc.host))); got != tc.want {
				t.Fatalf("ResolvConf(%q) = %q, want %q", tc.host, got, tc.want)
			}
		})
	}
}

// An all-digit hostname does not resolve through /etc/hosts (glibc reads
// it as an address), so NewHostname draws again, as Docker does.
func TestNewHostnameNeverAllDigits(t *testing.T) {
	digits := []byte{0x12, 0x34, 0x56, 0x78, 0x90, 0x12}
	r := bytes.NewReader(append(digits, 0xab, 0, 0, 0, 0, 0))
	name, err := newHostname(r)
	if err != nil {
		t.Fatal(err)
	}
	if name != "ab0000000000" {
		t.Fatalf("newHostname = %q, want the second draw ab0000000000", name)
	}
	if _, err := newHostname(bytes.NewReader(digits)); err == nil {
		t.Fatal("newHostname with only all-digit draws and then EOF: want an error")
	}
}
