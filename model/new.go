package model

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
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
	switch ref.Connector {
	case ConnectorOpenAI:
		return newOpenAI(ref, opts)
	case ConnectorAnthropic:
		return newAnthropic(ref, opts)
	case ConnectorScripted:
		return newScripted(ref, opts)
	case "":
		return nil, errors.New("model: no connector set: set connector to openai, anthropic or scripted")
	default:
		return nil, fmt.Errorf("model: unknown connector %q: use openai, anthropic or scripted", ref.Connector)
	}
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

// attemptLogger is SDK middleware that logs every failed HTTP attempt. The
// SDKs retry on their own, so without it a slow call would not say why.
// Only the endpoint, attempt number and status are logged: never headers
// (they carry the key) nor bodies.
func attemptLogger(log *slog.Logger, provider string) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		attempt := req.Header.Get("X-Stainless-Retry-Count")
		endpoint := req.URL.Scheme + "://" + req.URL.Host + req.URL.Path
		switch {
		case err != nil:
			log.Warn("model call attempt failed", "provider", provider, "endpoint", endpoint, "attempt", attempt, "err", err)
		case res.StatusCode >= 400:
			log.Warn("model call attempt failed", "provider", provider, "endpoint", endpoint, "attempt", attempt,
				"status", res.StatusCode, "retry_after", res.Header.Get("Retry-After"))
		}
		return res, err
	}
}
