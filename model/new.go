package model

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"evals.si/spec"
)

// Connector names accepted in spec.ModelRef.Connector.
const (
	ConnectorOpenAI    = "openai"
	ConnectorAnthropic = "anthropic"
	ConnectorScripted  = "scripted"
)

// Defaults applied when a ModelRef leaves a field unset.
const (
	DefaultTimeout         = 10 * time.Minute
	DefaultMaxRetries      = 4
	DefaultOpenAIBaseURL   = "https://api.openai.com/v1"
	DefaultAnthropicURL    = "https://api.anthropic.com"
	DefaultOpenAIKeyEnv    = spec.DefaultOpenAIKeyEnv
	DefaultAnthropicKeyEnv = spec.DefaultAnthropicKeyEnv
	// DefaultAnthropicMaxTokens is sent when neither the request nor the
	// ModelRef sets max_tokens: the Messages API requires the field.
	DefaultAnthropicMaxTokens = 8192
)

// Options carries what a connector needs from its caller rather than from
// globals: the environment, the HTTP client, the logger and the directory
// relative paths in the ModelRef are resolved against.
type Options struct {
	// Getenv looks up the API key variable named by api_key_env; nil means
	// os.Getenv.
	Getenv func(string) string
	// HTTPClient carries the calls (e.g. a proxy-aware client); nil means a
	// fresh client with no overall timeout (ModelRef.Timeout bounds calls).
	HTTPClient *http.Client
	// Logger receives retry and mapping notes; nil discards them.
	Logger *slog.Logger
	// BaseDir resolves a relative script_file (the spec file's directory).
	BaseDir string
	// Stream makes the openai and anthropic connectors use SSE streaming and
	// accumulate the same Response a non-streaming call returns.
	Stream bool
}

// New builds the connector named by ref.Connector.
func New(ref spec.ModelRef, opts Options) (Connector, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var (
		c   Connector
		err error
	)
	switch ref.Connector {
	case ConnectorOpenAI:
		c, err = newOpenAI(ref, opts)
	case ConnectorAnthropic:
		c, err = newAnthropic(ref, opts)
	case ConnectorScripted:
		c, err = newScripted(ref, opts)
	case "":
		return nil, errors.New("model: no connector set: set connector to openai, anthropic or scripted")
	default:
		return nil, fmt.Errorf("model: unknown connector %q: use openai, anthropic or scripted", ref.Connector)
	}
	if err != nil {
		return nil, err
	}
	return observed{Connector: c, provider: ref.Connector, model: ref.Model}, nil
}

// callSettings are the per-call limits shared by the HTTP connectors.
type callSettings struct {
	timeout    time.Duration
	maxRetries int
}

func settingsOf(ref spec.ModelRef) callSettings {
	s := callSettings{timeout: ref.Timeout.D(), maxRetries: DefaultMaxRetries}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if ref.MaxRetries != nil && *ref.MaxRetries >= 0 {
		s.maxRetries = *ref.MaxRetries
	}
	return s
}

// apiKey reads the key from the variable ref.APIKeyEnv names (or def).
func apiKey(ref spec.ModelRef, opts Options, def string) (string, error) {
	name := ref.APIKeyEnv
	if name == "" {
		name = def
	}
	key := opts.Getenv(name)
	if key == "" {
		return "", fmt.Errorf("model: %s connector for model %q needs an API key: environment variable %s is not set (set it, or name another variable with api_key_env)", ref.Connector, ref.Model, name)
	}
	return key, nil
}

// resolvePath resolves p against base unless it is absolute.
func resolvePath(base, p string) string {
	if filepath.IsAbs(p) || base == "" {
		return p
	}
	return filepath.Join(base, p)
}

// attemptLogger is SDK middleware that says when the SDK retries a call,
// one line per retry round with its reason and the wait the SDK is about to
// make ("retrying openai in about 1s (attempt 2/5): connection refused").
// The SDKs retry on their own, so without it a slow call would not say why;
// a failure that is not retried (the last attempt, a 4xx) is the call's
// error, reported once by the caller, and is logged here at Debug only.
// Only the endpoint, attempt number and status are logged: never headers
// (they carry the key) nor bodies.
func attemptLogger(log *slog.Logger, provider string, maxRetries int) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		if err == nil && res.StatusCode < 400 {
			return res, err
		}
		attempt, aerr := strconv.Atoi(req.Header.Get("X-Stainless-Retry-Count"))
		endpoint := req.URL.Scheme + "://" + req.URL.Host + req.URL.Path
		reason := attemptReason(res, err)
		if req.Context().Err() != nil || aerr != nil || attempt >= maxRetries || !sdkRetries(res) {
			log.Debug("model call attempt failed", "provider", provider, "endpoint", endpoint, "attempt", attempt+1, "err", reason)
			return res, err
		}
		log.Warn(fmt.Sprintf("retrying %s in about %s (attempt %d/%d): %s", provider, sdkDelay(res, attempt, time.Now()), attempt+2, maxRetries+1, reason),
			"endpoint", endpoint)
		return res, err
	}
}

// attemptReason is the root cause of a failed attempt, short: the socket
// error of a refused or reset connection, else the HTTP status.
func attemptReason(res *http.Response, err error) string {
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return errno.Error()
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return dnsErr.Error()
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Err != nil {
			return opErr.Err.Error()
		}
		return err.Error()
	}
	s := "HTTP " + res.Status
	if ra := res.Header.Get("Retry-After"); ra != "" {
		s += " (Retry-After " + ra + ")"
	}
	return s
}

// sdkRetries is whether the SDKs retry after res (nil: a transport error),
// as their shared retry rule has it.
func sdkRetries(res *http.Response) bool {
	if res == nil {
		return true
	}
	switch res.Header.Get("X-Should-Retry") {
	case "true":
		return true
	case "false":
		return false
	}
	return retryableStatus(res.StatusCode)
}

// sdkDelay is the SDKs' wait before the retry after attempt (0-based): the
// server's Retry-After-Ms or Retry-After, else 0.5s doubling per attempt up
// to 8s (the SDKs take up to a quarter off at random).
func sdkDelay(res *http.Response, attempt int, now time.Time) time.Duration {
	if res != nil {
		if ms, err := strconv.ParseFloat(res.Header.Get("Retry-After-Ms"), 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)).Round(100 * time.Millisecond)
		}
		if d := RetryAfter(res.Header, now); d > 0 {
			return d.Round(100 * time.Millisecond)
		}
	}
	d := 8 * time.Second
	if attempt < 4 {
		d = time.Duration(500<<attempt) * time.Millisecond
	}
	return d
}
