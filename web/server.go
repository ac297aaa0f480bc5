// Package web is the run viewer: a JSON API over the store under /api/ and
// a few pages of plain HTML, CSS and JavaScript, embedded in the binary, that
// fetch it. Pages: the runs list, a run, a trial (its trajectory timeline)
// and a comparison of two runs. Pages of a run or trial in progress poll the
// API and update in place.
//
// Trajectories can be long (an agent loop of hours makes 100,000 events), so
// the trial page never loads them whole: it renders the first page of events
// and fetches the next one when the reader scrolls near the end.
package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"

	"evals.si/store"
	"evals.si/trajectory"
)

// Store is what the viewer reads; *store.Store has it.
type Store interface {
	ListRuns(ctx context.Context, opt store.ListRunsOptions) ([]store.Run, error)
	GetRun(ctx context.Context, id string) (store.Run, error)
	ListTrials(ctx context.Context, runID string) ([]store.Trial, error)
	Scores(ctx context.Context, runID string) (map[string][]store.Score, error)
	GetTrial(ctx context.Context, id string) (store.Trial, error)
	TrialScores(ctx context.Context, trialID string) ([]store.Score, error)
	Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error)
	CountEvents(ctx context.Context, trialID string) (int, error)
	Artifacts(ctx context.Context, trialID string) ([]store.Artifact, error)
	OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error)
}

//go:embed assets
var assets embed.FS

// Server serves the viewer.
type Server struct {
	store  Store
	logger *slog.Logger
	mux    *http.ServeMux
}

// New returns a viewer over st.
func New(st Store, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{store: st, logger: logger, mux: http.NewServeMux()}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		// The directory is embedded at build time; its absence is a build bug.
		panic(err)
	}
	// Every page is the same document; app.js renders by path.
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	}
	for _, p := range []string{"GET /{$}", "GET /runs/{id}", "GET /trials/{id}", "GET /compare", "GET /compare/trials"} {
		s.mux.HandleFunc(p, page)
	}
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))

	s.mux.HandleFunc("GET /api/runs", s.api(s.apiRuns))
	s.mux.HandleFunc("GET /api/runs/{id}", s.api(s.apiRun))
	s.mux.HandleFunc("GET /api/trials/{id}", s.api(s.apiTrial))
	s.mux.HandleFunc("GET /api/trials/{id}/events", s.api(s.apiEvents))
	s.mux.HandleFunc("GET /api/trials/{id}/artifacts/{name}", s.api(s.apiArtifact))
	s.mux.HandleFunc("GET /api/compare", s.api(s.apiCompare))
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, errors.New("no such API endpoint: "+r.Method+" "+r.URL.Path))
	})
	return s
}

// ServeHTTP serves the pages and the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The viewer is read-only and same-origin; keep other sites from
	// framing it or sniffing content types.
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		s.logger.Debug("writing API response", "path", r.URL.Path, "err", err)
	}
}

// fail answers with {"error": "..."}.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	if code >= 500 {
		s.logger.Error("viewer API", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// httpError is an API error with its status (a bad request, a missing
// artifact); other errors returned by a handler are the store's.
type httpError struct {
	code int
	err  error
}

func (e httpError) Error() string { return e.err.Error() }
func (e httpError) Unwrap() error { return e.err }

// api adapts a handler that returns its error: an httpError is answered
// with its status, anything else as a store error.
func (s *Server) api(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		var he httpError
		switch {
		case err == nil:
		case errors.As(err, &he):
			s.fail(w, r, he.code, he.err)
		default:
			s.failStore(w, r, err)
		}
	}
}

// failStore maps store errors: missing or ambiguous ids are the client's.
func (s *Server) failStore(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, err)
	case errors.Is(err, store.ErrAmbiguous):
		s.fail(w, r, http.StatusBadRequest, err)
	case errors.Is(err, context.Canceled):
		// The browser went away; nothing to answer.
	default:
		s.fail(w, r, http.StatusInternalServerError, err)
	}
}
