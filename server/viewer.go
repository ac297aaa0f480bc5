package server

import (
	"context"
	"io"
	"net/http"
	"sync"

	"evals.si/access"
	"evals.si/store"
	"evals.si/trajectory"
	"evals.si/web"
)

// The viewer is served at the server's root for a principal's own project:
// each request gets a viewer over a view of the store that shows only that
// project's runs. Browsers authenticate with the cookie /login sets (for
// safe methods only, so a cross-site form cannot act with it); the CLI's
// `evalsi view --server` prints
// the page's URL here.

// projectStore is the store as one principal may read it.
type projectStore struct {
	s   *Server
	p   access.Principal
	ctx context.Context

	mu    sync.Mutex
	blobs map[string]bool // digests of artifacts this request may read
}

var _ web.Store = (*projectStore)(nil)

func (v *projectStore) ListRuns(ctx context.Context, opt store.ListRunsOptions) ([]store.Run, error) {
	opt.Project = v.p.Project
	if err := v.s.o.Access.Authorize(ctx, v.p, access.Resource{Kind: "run", Project: v.p.Project}, access.Request{Action: "runs.read", Time: v.s.o.Now()}); err != nil {
		return nil, err
	}
	return v.s.o.Store.ListRuns(ctx, opt)
}

func (v *projectStore) GetRun(ctx context.Context, id string) (store.Run, error) {
	run, err := v.s.readRun(ctx, v.p, id, "runs.read")
	if err != nil {
		return store.Run{}, store.ErrNotFound
	}
	return run, nil
}

func (v *projectStore) ListTrials(ctx context.Context, runID string) ([]store.Trial, error) {
	if _, err := v.GetRun(ctx, runID); err != nil {
		return nil, err
	}
	return v.s.o.Store.ListTrials(ctx, runID)
}

func (v *projectStore) Scores(ctx context.Context, runID string) (map[string][]store.Score, error) {
	if _, err := v.GetRun(ctx, runID); err != nil {
		return nil, err
	}
	return v.s.o.Store.Scores(ctx, runID)
}

func (v *projectStore) GetTrial(ctx context.Context, id string) (store.Trial, error) {
	t, err := v.s.readTrial(ctx, v.p, id)
	if err != nil {
		return store.Trial{}, store.ErrNotFound
	}
	return t, nil
}

func (v *projectStore) TrialScores(ctx context.Context, trialID string) ([]store.Score, error) {
	if _, err := v.GetTrial(ctx, trialID); err != nil {
		return nil, err
	}
	return v.s.o.Store.TrialScores(ctx, trialID)
}

func (v *projectStore) Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error) {
	if _, err := v.GetTrial(ctx, trialID); err != nil {
		return nil, err
	}
	return v.s.o.Store.Events(ctx, trialID, afterSeq, limit)
}

func (v *projectStore) CountEvents(ctx context.Context, trialID string) (int, error) {
	if _, err := v.GetTrial(ctx, trialID); err != nil {
		return 0, err
	}
	return v.s.o.Store.CountEvents(ctx, trialID)
}

func (v *projectStore) Artifacts(ctx context.Context, trialID string) ([]store.Artifact, error) {
	if _, err := v.GetTrial(ctx, trialID); err != nil {
		return nil, err
	}
	as, err := v.s.o.Store.Artifacts(ctx, trialID)
	v.mu.Lock()
	for _, a := range as {
		v.blobs[a.Digest] = true
	}
	v.mu.Unlock()
	return as, err
}

// OpenBlob opens only blobs of artifacts this request listed through a
// trial it may read: a digest alone grants nothing.
func (v *projectStore) OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	v.mu.Lock()
	ok := v.blobs[digest]
	v.mu.Unlock()
	if !ok {
		return nil, store.ErrNotFound
	}
	return v.s.o.Store.OpenBlob(ctx, digest)
}

const tokenCookie = "evalsi_token"

func (s *Server) viewer(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	ps := &projectStore{s: s, p: p, ctx: r.Context(), blobs: map[string]bool{}}
	web.New(ps, s.log).ServeHTTP(w, r)
	return nil
}

// login sets the token cookie from a form post, for browsers.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><title>Evals.si — sign in</title><form method=post action=/login><label>API token <input name=token type=password autocomplete=off></label> <button>Sign in</button></form>`)
		return
	}
	// Another site must not sign a browser in with its own token (login
	// CSRF): net/http's cross-origin check refuses cross-site posts.
	if err := http.NewCrossOriginProtection().Check(r); err != nil {
		writeError(w, http.StatusForbidden, "forbidden", "sign in from this server's own /login page", "")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	tok := r.PostFormValue("token")
	if _, err := s.o.Access.Authenticate(tok); err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", "the token is not valid", "token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
