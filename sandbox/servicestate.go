package sandbox

import "sync"

// ServiceState is a Service a rung feeds: it keeps the tail of the
// process's output (at most DefaultOutputLimit bytes) and its exit code.
// The zero value is ready to use.
type ServiceState struct {
	mu     sync.Mutex
	out    []byte
	code   int
	exited bool
	done   chan struct{}
}

var _ Service = (*ServiceState)(nil)

// Write appends output, dropping the oldest bytes past DefaultOutputLimit.
func (s *ServiceState) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p) >= DefaultOutputLimit {
		s.out = append(s.out[:0], p[len(p)-DefaultOutputLimit:]...)
		return len(p), nil
	}
	if over := len(s.out) + len(p) - DefaultOutputLimit; over > 0 {
		s.out = append(s.out[:0], s.out[over:]...)
	}
	s.out = append(s.out, p...)
	return len(p), nil
}

// SetExited records the exit code; only the first call counts.
func (s *ServiceState) SetExited(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited {
		return
	}
	s.code, s.exited = code, true
	if s.done != nil {
		close(s.done)
	}
}

// Done is closed once the process has exited.
func (s *ServiceState) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
		if s.exited {
			close(s.done)
		}
	}
	return s.done
}

// Exited reports whether the process has ended, and its exit code.
func (s *ServiceState) Exited() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.exited
}

// Output is a copy of the tail of the process's output.
func (s *ServiceState) Output() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.out...)
}
