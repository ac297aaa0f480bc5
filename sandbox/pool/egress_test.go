package pool

import (
	"sync"
	"testing"

	"evals.si/egress"
)

// The pool's --allow-host ceiling: a client's allowlist must stay within
// it, and allow-all is refused under one.
func TestPoolPolicyCeiling(t *testing.T) {
	ceiling := []string{"pypi.org", "files.example.com:443", "*.example.net:443"}
	for _, tc := range []struct {
		name string
		req  egress.Policy
		ok   bool
	}{
		{"any port of a host without one", egress.Policy{AllowHosts: []string{"PyPI.org.:443", "pypi.org:80"}}, true},
		{"same port", egress.Policy{AllowHosts: []string{"files.example.com:443"}}, true},
		{"other port", egress.Policy{AllowHosts: []string{"files.example.com:8443"}}, false},
		{"wildcard as listed", egress.Policy{AllowHosts: []string{"*.example.net:443"}}, true},
		{"a name below the wildcard", egress.Policy{AllowHosts: []string{"a.b.example.net:443", "*.b.example.net:443"}}, true},
		{"the wildcard's own domain", egress.Policy{AllowHosts: []string{"example.net:443"}}, false},
		{"host not listed", egress.Policy{AllowHosts: []string{"evil.test:443"}}, false},
		{"allow-all", egress.Policy{AllowAll: true}, false},
		{"deny", egress.Policy{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := poolPolicy(tc.req, ceiling)
			if (err == nil) != tc.ok {
				t.Fatalf("poolPolicy(%+v) error %v, want ok=%v", tc.req, err, tc.ok)
			}
			if err == nil && !pol.RefuseOwnMachine {
				t.Errorf("a pool policy without RefuseOwnMachine: %+v", pol)
			}
		})
	}
	if _, err := poolPolicy(egress.Policy{AllowAll: true}, nil); err != nil {
		t.Errorf("allow-all without a ceiling: %v", err)
	}
}

// Places are reserved as they are granted: concurrent creates by one client
// never pass MaxObjects together, a released place is free again, and
// another client's count is its own.
func TestRoomReservesPlaces(t *testing.T) {
	s := &Server{o: Options{MaxObjects: 2}, objs: map[string]*object{}}
	var mu sync.Mutex
	var granted []func()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if release, err := s.room("a"); err == nil {
				mu.Lock()
				granted = append(granted, release)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(granted) != 2 {
		t.Fatalf("%d of 10 concurrent reservations granted, want MaxObjects 2", len(granted))
	}
	if _, err := s.room("b"); err != nil {
		t.Errorf("another client refused: %v", err)
	}
	granted[0]()
	granted[0]() // releasing twice frees one place only
	if _, err := s.room("a"); err != nil {
		t.Errorf("after a release: %v", err)
	}
	if _, err := s.room("a"); err == nil {
		t.Errorf("a third place granted while two are held")
	}
}
