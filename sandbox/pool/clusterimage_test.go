package pool

import (
	"strings"
	"testing"

	"evals.si/sandbox/pool/wire"
)

// A pod-rung pool's images are the cluster's: nothing is fetched, a
// pinned digest is the digest, and what the pool cannot honour (a path of
// its own machine, signatures it cannot check) is refused, not skipped.
func TestClusterImage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     wire.ImageRequest
		digest  string
		refused string
	}{
		{"a tag", wire.ImageRequest{Ref: "registry.example/task:1"}, "", ""},
		{"pinned", wire.ImageRequest{Ref: "registry.example/task@sha256:" + strings.Repeat("a", 64)}, "sha256:" + strings.Repeat("a", 64), ""},
		{"tag and digest", wire.ImageRequest{Ref: "registry.example:5000/task:1@sha256:" + strings.Repeat("b", 64)}, "sha256:" + strings.Repeat("b", 64), ""},
		{"a path of the pool's", wire.ImageRequest{Ref: "oci-layout:/var/lib/images/task"}, "", "push it to a registry the cluster can reach"},
		{"signatures", wire.ImageRequest{Ref: "registry.example/task:1", Verified: true, Keys: []string{"-----BEGIN PUBLIC KEY-----"}}, "", "admission policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := clusterImage(tc.req)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("clusterImage(%+v) = %v, %v; want an error saying %q", tc.req, img, err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if img.Ref != tc.req.Ref || img.Digest != tc.digest || img.Root != "" {
				t.Errorf("clusterImage(%q) = ref %q digest %q root %q; want the reference as given, digest %q, no root", tc.req.Ref, img.Ref, img.Digest, img.Root, tc.digest)
			}
		})
	}
}
