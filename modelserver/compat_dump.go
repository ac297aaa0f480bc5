package modelserver

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DumpTo makes the server write every request it receives to dir, one JSON
// file per request ({"method","path","query","header","body"}) named by its
// arrival order and path, e.g. 0003-v1-messages.json. It is for finding out
// what a client (an agent CLI) sends; credentials are redacted as in
// Requests. Call it before Listen.
func (s *Server) DumpTo(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model server: creating dump directory: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dumpDir = dir
	return nil
}

// dump writes request n; the caller holds s.mu. A failure is logged, not
// returned: the dump is a debugging aid and must not fail the request.
func (s *Server) dump(n int, r Request) {
	var body any = string(r.Body)
	if json.Valid(r.Body) {
		body = json.RawMessage(r.Body)
	}
	b, err := json.MarshalIndent(map[string]any{
		"method": r.Method, "path": r.Path, "query": r.Query, "header": r.Header, "body": body,
	}, "", "  ")
	if err == nil {
		name := fmt.Sprintf("%04d-%s.json", n, strings.Trim(strings.ReplaceAll(r.Path, "/", "-"), "-"))
		err = os.WriteFile(filepath.Join(s.dumpDir, name), b, 0o644)
	}
	if err != nil {
		s.log.Warn("model server: dumping request", "path", r.Path, "err", err)
	}
}
