package remote_test

import (
	"net/http"
	"reflect"
	"testing"

	"evals.si/agent/remote"
)

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		raw, hint, want string
	}{
		{"http://127.0.0.1:8080/mcp", "", ""},
		{"https://api.example/v1", "give the base", ""},
		{"127.0.0.1:8080", "", `target.agent.x.url "127.0.0.1:8080" is not an http(s) URL`},
		{"ftp://host/x", "give the base", `target.agent.x.url "ftp://host/x" is not an http(s) URL: give the base`},
		{"http:///path", "", `target.agent.x.url "http:///path" is not an http(s) URL`},
	} {
		err := remote.CheckURL("target.agent.x.url", tc.raw, tc.hint)
		if got := errText(err); got != tc.want {
			t.Errorf("CheckURL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestHeaders(t *testing.T) {
	getenv := func(k string) string { return map[string]string{"TOKEN": "Bearer s3cret"}[k] }
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    http.Header
		wantErr string
	}{
		{"none", nil, http.Header{}, ""},
		{"one", map[string]string{"authorization": "TOKEN"}, http.Header{"Authorization": {"Bearer s3cret"}}, ""},
		{"unset variable", map[string]string{"X-Key": "UNSET"}, nil,
			"f: header X-Key reads the worker variable UNSET, which is not set: export it where evalsi runs"},
		{"bad name", map[string]string{"X Key": "TOKEN"}, nil, `f: "X Key" is not a header name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := remote.Headers("f", tc.env, getenv)
			if got := errText(err); got != tc.wantErr {
				t.Errorf("err = %q, want %q", got, tc.wantErr)
			}
			if err == nil && !reflect.DeepEqual(h, tc.want) {
				t.Errorf("headers = %v, want %v", h, tc.want)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
