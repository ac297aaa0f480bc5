package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"evals.si/store"
	"evals.si/store/storetest"
)

// TestSuite runs the shared Backend suite against the SQLite store, a
// fresh database file per case.
func TestSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend {
		s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "evalsi.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
