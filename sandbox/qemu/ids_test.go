package qemu

import (
	"testing"
)

// Leases never hand one id out twice while held, and an id comes back
// once released.
func TestLeaseID(t *testing.T) {
	dir := t.TempDir()
	seen := map[int]bool{}
	var held []*idLease
	for range 64 {
		l, err := leaseID(dir)
		if err != nil {
			t.Fatal(err)
		}
		if l.id < DefaultID || l.id >= DefaultID+idCount {
			t.Fatalf("id %d outside [%d, %d)", l.id, DefaultID, DefaultID+idCount)
		}
		if seen[l.id] {
			t.Fatalf("id %d leased twice", l.id)
		}
		seen[l.id] = true
		held = append(held, l)
	}
	for _, l := range held {
		l.release()
	}
	// All free again: a full sweep of the range leases every one.
	all := map[int]bool{}
	for range idCount {
		l, err := leaseID(dir)
		if err != nil {
			t.Fatal(err)
		}
		all[l.id] = true
		defer l.release()
	}
	if len(all) != idCount {
		t.Fatalf("leased %d distinct ids, want %d", len(all), idCount)
	}
	if _, err := leaseID(dir); err == nil {
		t.Fatal("a lease past the range succeeded")
	}
}
