package sandbox

import "testing"

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
