package sandbox

import "testing"

func TestNoProxy(t *testing.T) {
	for _, tc := range []struct {
		hosts []string
		want  string
	}{
		{nil, "localhost,127.0.0.1,::1,127.0.1.1"},
		{[]string{"pypi.org:443", "10.0.0.5:80"}, "localhost,127.0.0.1,::1,127.0.1.1"},
		{[]string{"pypi.org:443", "127.0.0.1:8089"}, ""},
		{[]string{"localhost:3000"}, ""},
		{[]string{"[::1]:8080"}, ""},
		{[]string{"127.0.0.2"}, ""},
	} {
		if got := NoProxy(tc.hosts); got != tc.want {
			t.Errorf("NoProxy(%q) = %q, want %q", tc.hosts, got, tc.want)
		}
	}
}
