package server

import (
	_ "embed"
	"net/http"
)

// openapi.json describes the API; it is served as is, and the API tests
// (and schemathesis in CI) check the server against it.
//
//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPIDoc)
}
