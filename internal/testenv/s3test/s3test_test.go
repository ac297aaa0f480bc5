package s3test_test

import (
	"slices"
	"testing"

	"evals.si/internal/testenv/s3test"
)

// TestStart proves the server comes up on loopback with its bucket, and
// an object put is listed.
func TestStart(t *testing.T) {
	s := s3test.Start(t)
	s.Put(t, "a/b.txt", []byte("hello"))
	if keys := s.Keys(t, "a/"); !slices.Equal(keys, []string{"a/b.txt"}) {
		t.Fatalf("keys = %v", keys)
	}
}
