package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The probes an orchestrator asks (Kubernetes' liveness and readiness):
// /healthz says the process serves HTTP, /readyz that it can also serve
// the API, its store answering with a schema. Neither needs a token and
// neither says anything about runs; a failure's details go to the log,
// not to the unauthenticated caller.

// PathReady and PathMetrics are served without a token, as api.PathHealth.
const (
	PathReady   = "/readyz"
	PathMetrics = "/metrics"
)

// readyTimeout bounds the store query of one readiness probe: a store
// that takes longer is not ready (Kubernetes' own probe timeout is 1s by
// default; the manifests give it more).
const readyTimeout = 2 * time.Second

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	v, err := s.o.Store.SchemaVersion(ctx)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		s.log.Warn("not ready: the store did not answer", "timeout", readyTimeout, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("the store did not answer within %s", readyTimeout), "")
	case err != nil:
		s.log.Warn("not ready: the store's query failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the store's query failed (the server log has the error)", "")
	case v <= 0:
		// Opening a store migrates it, so this is a database another
		// process emptied or has not migrated yet.
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the store has no schema: its migrations have not run", "")
	default:
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "schema_version": v})
	}
}
