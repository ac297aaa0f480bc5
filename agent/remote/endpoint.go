package remote

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"evals.si/model"
)

// CheckURL refuses raw unless it is an absolute http(s) URL. field is the
// spec field (target.agent.mcp.url) and hint, when set, what to give
// instead.
func CheckURL(field, raw, hint string) error {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	if hint != "" {
		return fmt.Errorf("%s %q is not an http(s) URL: %s", field, raw, hint)
	}
	return fmt.Errorf("%s %q is not an http(s) URL", field, raw)
}

// HTTPClient is opts' HTTP client, or a new one.
func HTTPClient(opts model.Options) *http.Client {
	if opts.HTTPClient != nil {
		return opts.HTTPClient
	}
	return &http.Client{}
}

// Getenv is opts' Getenv, or os.Getenv.
func Getenv(opts model.Options) func(string) string {
	if opts.Getenv != nil {
		return opts.Getenv
	}
	return os.Getenv
}

// Headers resolves headers_env (header name → worker variable) into
// headers, read through getenv (os.Getenv when nil). A variable that is
// unset or empty is an error naming the variable, never its value. field
// is the spec field (target.agent.http.headers_env).
func Headers(field string, env map[string]string, getenv func(string) string) (http.Header, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	h := http.Header{}
	for name, v := range env {
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, ": \r\n") {
			return nil, fmt.Errorf("%s: %q is not a header name", field, name)
		}
		val := getenv(v)
		if val == "" {
			return nil, fmt.Errorf("%s: header %s reads the worker variable %s, which is not set: export it where evalsi runs", field, name, v)
		}
		h.Set(name, val)
	}
	return h, nil
}
