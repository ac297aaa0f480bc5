// Package apiclient talks to `evalsid serve`: the CLI submits and follows
// runs through it, and `evalsid worker` leases trials through it (Queue).
// Tokens come from EVALSI_TOKEN or the CLI's config file, never from a
// flag, so they stay out of shell history and process listings.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccy/go-yaml"

	"evals.si/api"
	"evals.si/spec"
)

// Client is an API client for one server.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	// redact, when set, rewrites every request body before it is sent
	// (a worker removes its secrets; see Queue).
	redact func([]byte) []byte
	// retryFor is how long a request that could not reach the server
	// (refused, reset before a response) is tried again.
	retryFor time.Duration
}

// New returns a client of the server at base (http://host:port).
func New(base, token string) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q is not an http(s)://host:port URL", base)
	}
	if token == "" {
		return nil, errors.New("no API token: set EVALSI_TOKEN, or token in the config file (evalsi's config.yaml)")
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return nil, fmt.Errorf("--server %s: refusing to send the API token over plain http to another machine; use https (evalsid serve's tls settings, or a TLS proxy in front of it)", u.Redacted())
	}
	return &Client{base: u, token: token, http: &http.Client{Timeout: 2 * time.Minute}, retryFor: 30 * time.Second}, nil
}

// loopback reports whether host is this machine (localhost or a loopback
// address), where plain http exposes the token to no network.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ConfigFile is where the CLI keeps its settings:
// $XDG_CONFIG_HOME/evalsi/config.yaml, else ~/.config/evalsi/config.yaml.
func ConfigFile(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "evalsi", "config.yaml")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "evalsi", "config.yaml")
	}
	return ""
}

// Token reads the API token for server: EVALSI_TOKEN, else the config
// file's servers.<server>.token, else its token.
func Token(getenv func(string) string, server string) (string, error) {
	if t := getenv("EVALSI_TOKEN"); t != "" {
		return t, nil
	}
	path := ConfigFile(getenv)
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the token from %s: %w", path, err)
	}
	var cfg struct {
		Token   string `yaml:"token"`
		Servers map[string]struct {
			Token string `yaml:"token"`
		} `yaml:"servers"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if s, ok := cfg.Servers[strings.TrimRight(server, "/")]; ok && s.Token != "" {
		return s.Token, nil
	}
	return cfg.Token, nil
}

// Error is an error response of the API.
type Error struct {
	Status int
	api.ErrorBody
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("server: %s (%d %s)", msg, e.Status, e.Code)
}

// do sends a request with a JSON body (nil for none) and decodes a JSON
// answer into out (nil to drop it). It returns the status.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encoding the request to %s: %w", path, err)
		}
		if c.redact != nil {
			b = c.redact(b)
		}
		body = b
	}
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp.StatusCode, decodeError(resp)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding the answer of %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// send sends one request, trying again while the server cannot be reached
// at all (it is restarting): a request that never arrived is safe to send
// again.
func (c *Client) send(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	deadline := time.Now().Add(c.retryFor)
	wait := 100 * time.Millisecond
	for {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.http.Do(req)
		if err == nil {
			return resp, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == "" {
		return &Error{Status: resp.StatusCode, ErrorBody: api.ErrorBody{Code: "http", Message: strings.TrimSpace(string(b))}}
	}
	return &Error{Status: resp.StatusCode, ErrorBody: e.Error}
}

// Submit starts a run of a loaded, validated spec.
func (c *Client) Submit(ctx context.Context, name string, s *spec.Spec, project string) (api.Run, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return api.Run{}, fmt.Errorf("encoding the spec: %w", err)
	}
	var run api.Run
	_, err = c.do(ctx, http.MethodPost, "/v1/runs", api.SubmitRequest{Project: project, Name: filepath.Base(name), Spec: b}, &run)
	return run, err
}

// Run returns a run with its counts (and summary once finished).
func (c *Client) Run(ctx context.Context, id string) (api.Run, error) {
	var run api.Run
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, &run)
	return run, err
}

// Runs lists runs, newest first.
func (c *Client) Runs(ctx context.Context, limit int, before string) (api.RunList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if before != "" {
		q.Set("before", before)
	}
	var out api.RunList
	_, err := c.do(ctx, http.MethodGet, "/v1/runs?"+q.Encode(), nil, &out)
	return out, err
}

// Trials lists a run's trials.
func (c *Client) Trials(ctx context.Context, runID string) (api.TrialList, error) {
	var out api.TrialList
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/trials", nil, &out)
	return out, err
}

// Export writes a run's JSONL export to w.
func (c *Client) Export(ctx context.Context, runID string, w io.Writer) error {
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/export?format=jsonl", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeError(resp)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// Promote appends a run's matching records to a promoted dataset.
func (c *Client) Promote(ctx context.Context, runID string, req api.PromoteRequest) (api.PromoteResult, error) {
	var out api.PromoteResult
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/promote", req, &out)
	return out, err
}

// Follow polls a run until it is no longer running, calling progress with
// each state seen, and returns the last.
func (c *Client) Follow(ctx context.Context, id string, every time.Duration, progress func(api.Run)) (api.Run, error) {
	for {
		run, err := c.Run(ctx, id)
		if err != nil {
			return run, err
		}
		if progress != nil {
			progress(run)
		}
		if run.Status != "running" {
			return run, nil
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(every):
		}
	}
}

// Base is the server's URL, as given to New without a trailing slash.
func (c *Client) Base() string { return c.base.String() }

// Cancel asks the server to cancel a run: its pending trials are not
// started and its running ones are stopped. (The EvalRun operator calls it
// when an EvalRun is deleted.)
func (c *Client) Cancel(ctx context.Context, id string) (api.Run, error) {
	var run api.Run
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/cancel", nil, &run)
	return run, err
}
