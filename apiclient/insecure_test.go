package apiclient_test

import (
	"strings"
	"testing"

	"evals.si/apiclient"
)

// The token goes over plain http only to this machine.
func TestPlainHTTPOnlyOnLoopback(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://[::1]:8080", true},
		{"http://localhost:8080", true},
		{"https://evals.example", true},
		{"http://evals.example:8080", false},
		{"http://10.0.0.5:8080", false},
		{"http://127.0.0.1.evil.example", false},
	} {
		_, err := apiclient.New(tt.url, "tok-0123456789abcdef")
		if (err == nil) != tt.ok {
			t.Errorf("New(%s): %v, want ok=%v", tt.url, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "https") {
			t.Errorf("New(%s): %v does not say to use https", tt.url, err)
		}
	}
}
