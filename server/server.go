// Package server is `evalsid serve`: the HTTP API a team shares. It takes
// run submissions (checking the submitter's rights, the credentials the run
// names and the programs it would start on a worker), hands trial attempts
// to workers under leases, records what they report, sweeps expired leases
// back into the queue, finalizes runs, and serves runs, trials, events,
// datasets and the viewer to the projects allowed to read them. It never
// runs a trial itself.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"evals.si/access"
	"evals.si/api"
	"evals.si/spec"
	"evals.si/store"
)

// Store is the store a server needs: a whole backend, and its schema
// version, which /readyz asks.
type Store interface {
	store.Backend
	SchemaVersion(ctx context.Context) (int, error)
}

// Recorder loads a submitted spec's dataset and applies the record
// policies (planner.Host.Records).
type Records interface {
	Records(ctx context.Context, f *spec.File) ([]spec.Record, error)
}

// Options configure a Server.
type Options struct {
	Store  Store
	Access *access.Access
	// Records loads datasets; relative paths resolve against DatasetsDir.
	Records     Records
	DatasetsDir string
	// Datasets reads datasets_dir (Config.OpenDatasets; default: the
	// directory DatasetsDir). A datasets_dir that is not on this machine
	// (S3) is loaded from a copy of the files a spec names.
	Datasets DatasetFiles
	// LeaseTTL is the default lease (30s); MaxLeaseTTL caps what a worker
	// may ask for (5m).
	LeaseTTL    time.Duration
	MaxLeaseTTL time.Duration
	// Viewer serves the run viewer at the root (see viewer.go).
	Viewer bool
	// MaxTrials caps records × trials of one run (default 100000).
	MaxTrials int
	// AllowLocalImages admits image references a worker resolves from its
	// own files (dir:, oci-layout:, docker-archive:) and mirrors to them;
	// AllowUnsafeHost admits the host rung (see confine.go).
	AllowLocalImages bool
	AllowUnsafeHost  bool
	// Promote, when set, serves POST /v1/runs/{id}/promote.
	Promote PromoteFunc
	Logger  *slog.Logger
	// Now is the clock (tests).
	Now func() time.Time
}

// PromoteFunc appends a run's matching records to
// <datasets_dir>/promoted/<project>/<name>.jsonl.
type PromoteFunc func(ctx context.Context, st Store, project, runID string, req api.PromoteRequest) (api.PromoteResult, error)

// Server is the API.
type Server struct {
	// evals caches each run's evaluator count (worker.go).
	evals sync.Map
	// submits bounds the submissions parsed at once.
	submits chan struct{}
	o       Options
	mux     *http.ServeMux
	log     *slog.Logger
	metrics *metrics
}

// Request body limits: a submitted spec (its inline records included), a
// batch of events, anything else.
const (
	maxSubmitBytes = 8 << 20
	maxEventsBytes = 64 << 20
	maxBodyBytes   = 1 << 20
)

// New returns a server over o.Store.
func New(o Options) (*Server, error) {
	if o.Store == nil || o.Access == nil || o.Records == nil {
		return nil, errors.New("server: a store, access rules and a dataset loader are required")
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 30 * time.Second
	}
	if o.MaxLeaseTTL <= 0 {
		o.MaxLeaseTTL = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxTrials <= 0 {
		o.MaxTrials = 100000
	}
	o.Datasets, o.Records = datasetsOf(o)
	s := &Server{o: o, mux: http.NewServeMux(), log: o.Logger, submits: make(chan struct{}, 2)}
	s.metrics = newMetrics(o.Store, o.Logger)
	s.o.Store = meteredStore{Store: o.Store, m: s.metrics}
	s.routes()
	return s, nil
}

// Route is one route of the API: a method and a path pattern of
// net/http's ServeMux. The OpenAPI description has exactly these (the test
// checks it).
type Route struct {
	Method, Pattern string
}

type route struct {
	Route
	h http.Handler
}

// table is the API's routes.
func (s *Server) table() []route {
	r := func(method, pattern string, h http.Handler) route {
		return route{Route{method, pattern}, h}
	}
	return []route{
		r("GET", api.PathOpenAPI, http.HandlerFunc(s.openAPI)),
		r("GET", api.PathHealth, http.HandlerFunc(s.healthz)),
		r("GET", PathReady, http.HandlerFunc(s.readyz)),
		r("GET", PathMetrics, s.metrics.handler(s.log)),

		r("POST", "/v1/runs", s.authed(s.submit)),
		r("GET", "/v1/runs", s.authed(s.listRuns)),
		r("GET", "/v1/runs/{id}", s.authed(s.getRun)),
		r("GET", "/v1/runs/{id}/trials", s.authed(s.listTrials)),
		r("GET", "/v1/runs/{id}/export", s.authed(s.exportRun)),
		r("POST", "/v1/runs/{id}/promote", s.authed(s.promote)),
		r("POST", "/v1/runs/{id}/cancel", s.authed(s.cancelRun)),
		r("GET", "/v1/trials/{id}/events", s.authed(s.trialEvents)),
		r("GET", "/v1/datasets", s.authed(s.listDatasets)),
		r("GET", "/v1/datasets/{path...}", s.authed(s.getDataset)),

		r("POST", "/v1/worker/lease", s.authed(s.lease)),
		r("GET", "/v1/worker/runs/{id}", s.authed(s.workerRun)),
		r("POST", "/v1/worker/trials/{id}/heartbeat", s.authed(s.heartbeat)),
		r("POST", "/v1/worker/trials/{id}/events", s.authed(s.appendEvents)),
		r("POST", "/v1/worker/trials/{id}/finish", s.authed(s.finish)),
	}
}

// Routes lists the API's routes (the viewer's pages and /login aside).
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.table() {
		out = append(out, r.Route)
	}
	return out
}

func (s *Server) routes() {
	m := instrumentedMux{s.mux, s.metrics}
	for _, r := range s.table() {
		m.Handle(r.Method+" "+r.Pattern, r.h)
	}
	m.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		if s.methodNotAllowed(w, r) {
			return
		}
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API route %s %s (the API is described at %s)", r.Method, r.URL.Path, api.PathOpenAPI), "")
	})
	if s.o.Viewer {
		m.HandleFunc("/login", s.login)
		viewer := s.authed(s.viewer)
		m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if s.methodNotAllowed(w, r) {
				return
			}
			viewer.ServeHTTP(w, r)
		})
	} else {
		m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if s.methodNotAllowed(w, r) {
				return
			}
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route %s %s (the API is described at %s)", r.Method, r.URL.Path, api.PathOpenAPI), "")
		})
	}
}

// methodNotAllowed answers 405 with Allow when the request's path is an API
// route under other methods: the catch-all patterns would otherwise take
// it for an unknown path.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) bool {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); strings.HasPrefix(pattern, m+" ") || m == http.MethodHead && strings.HasPrefix(pattern, "GET ") {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return false
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s %s is not served; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")), "")
	return true
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
			writeError(w, http.StatusInternalServerError, "internal", "internal error", "")
		}
	}()
	// The mux would redirect a path with dot segments or empty ones to its
	// clean form; the API refuses it instead, so no client follows a
	// redirect out of the path it named (/v1/datasets/../x).
	if strings.HasPrefix(r.URL.Path, "/v1/") && path.Clean(r.URL.Path) != strings.TrimSuffix(r.URL.Path, "/") {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the path %q has dot or empty segments; use its clean form", r.URL.Path), "path")
		return
	}
	s.mux.ServeHTTP(w, r)
}

type principalKey struct{}

// handler is an API handler; an error it returns becomes the response.
type handler func(w http.ResponseWriter, r *http.Request, p access.Principal) error

// authed authenticates the bearer token of every request it serves.
func (s *Server) authed(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			// Browsers (the viewer) carry the token in the cookie /login
			// set; only for safe methods, so no cross-site form acts with it.
			if c, err := r.Cookie(tokenCookie); err == nil {
				tok, ok = c.Value, true
			}
		}
		if !ok || tok == "" {
			if s.o.Viewer && !strings.HasPrefix(r.URL.Path, "/v1/") && r.Method == http.MethodGet {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="evalsi"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "this API needs a bearer token (Authorization: Bearer TOKEN; the CLI reads EVALSI_TOKEN or the token in its config file)", "")
			return
		}
		p, err := s.o.Access.Authenticate(tok)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="evalsi", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "the bearer token is not valid", "")
			return
		}
		if err := h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)), p); err != nil {
			s.fail(w, r, err)
		}
	})
}

// apiError is an error with its HTTP status.
type apiError struct {
	status int
	code   string
	field  string
	err    error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func badRequest(field string, format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, code: "bad_request", field: field, err: fmt.Errorf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{status: http.StatusNotFound, code: "not_found", err: fmt.Errorf(format, args...)}
}

func refused(err error) error {
	return &apiError{status: http.StatusUnprocessableEntity, code: "refused", err: err}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae.status, ae.code, ae.err.Error(), ae.field)
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body is over the limit of %d bytes", mbe.Limit), "")
	case errors.Is(err, access.ErrDenied):
		writeError(w, http.StatusForbidden, "forbidden", err.Error(), "")
	case errors.Is(err, store.ErrCancelled):
		// A lost lease to every worker; the reason tells one that knows it.
		writeJSON(w, http.StatusConflict, api.Error{Error: api.ErrorBody{Code: "lease_lost", Reason: api.ReasonCancelled, Message: err.Error()}})
	case errors.Is(err, store.ErrLeaseLost):
		writeError(w, http.StatusConflict, "lease_lost", err.Error(), "")
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrAmbiguous):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), "")
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error (the server log has the details)", "")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg, field string) {
	writeJSON(w, status, api.Error{Error: api.ErrorBody{Code: code, Message: msg, Field: field}})
}

// decode reads a JSON body of at most limit bytes into v, refusing unknown
// fields and trailing data.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &apiError{status: http.StatusUnsupportedMediaType, code: "bad_request", field: "Content-Type", err: fmt.Errorf("the body must be application/json, not %q", ct)}
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return badRequest("", "the request needs a JSON body")
		}
		return badRequest("", "decoding the JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("", "the JSON body has data after its object")
	}
	return nil
}
