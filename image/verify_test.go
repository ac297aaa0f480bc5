package image

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// keyPair is a cosign-style ECDSA P-256 key.
type keyPair struct {
	priv   *ecdsa.PrivateKey
	pubPEM string
}

func newKey(t *testing.T) keyPair {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{k, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}
}

// signatureImage is what `cosign sign --key` uploads for digest: an OCI
// manifest whose one layer is the simple-signing payload, with the
// base64 ASN.1 signature of its SHA-256 in an annotation.
func signatureImage(t *testing.T, k keyPair, digest string) v1.Image {
	t.Helper()
	payload, err := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": "ignored"},
			"image":    map[string]string{"docker-manifest-digest": digest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, k.priv, h[:])
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:       static.NewLayer(payload, cosignPayloadType),
		Annotations: map[string]string{cosignSigAnnotation: base64.StdEncoding.EncodeToString(sig)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mutate.ConfigMediaType(img, types.OCIConfigJSON)
}

func sigTag(repo, digest string) string {
	return repo + ":" + strings.Replace(digest, ":", "-", 1) + ".sig"
}

func TestVerifyRegistry(t *testing.T) {
	reg := startRegistry(t)
	good, bad := newKey(t), newKey(t)
	keyFile := filepath.Join(t.TempDir(), "cosign.pub")
	os.WriteFile(keyFile, []byte(good.pubPEM), 0o600)

	img := testImage(t)
	d, _ := img.Digest()
	repo := reg.host + "/signed/app"
	push(t, repo+":v1", img)
	other := testImage(t) // random layer: another digest
	od, _ := other.Digest()
	push(t, repo+":unsigned", other)
	push(t, sigTag(repo, d.String()), signatureImage(t, good, d.String()))
	// A signature by the right key over the wrong digest, under the
	// unsigned image's tag: must not count.
	push(t, repo+":wrongdigest", other)
	push(t, sigTag(repo, od.String()), signatureImage(t, good, d.String()))

	s, _ := openStore(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, ref string
		keys      []string
		wantErr   string
	}{
		{"signed, key file", repo + ":v1", []string{keyFile}, ""},
		{"signed, inline key among others", repo + ":v1", []string{bad.pubPEM, good.pubPEM}, ""},
		{"signed, by digest", repo + "@" + d.String(), []string{keyFile}, ""},
		{"wrong key", repo + ":v1", []string{bad.pubPEM}, "none of 1 signatures is valid"},
		{"unsigned", repo + ":unsigned", []string{keyFile}, "none of 1 signatures is valid"},
		{"no keys", repo + ":v1", nil, "lists no keys"},
		{"bad key", repo + ":v1", []string{"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}, "parsing public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Verify(ctx, tc.ref, tc.keys, false)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Verify: %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
	// Nothing signed at all for a fresh image: no .sig tag.
	push(t, repo+":fresh", testImage(t))
	if err := s.Verify(ctx, repo+":fresh", []string{keyFile}, false); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("no signature tag: %v", err)
	}

	got, err := s.ResolveVerified(ctx, repo+":v1", []string{keyFile}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != d.String() || got.Source != repo+"@"+d.String() {
		t.Errorf("ResolveVerified: digest %s source %s", got.Digest, got.Source)
	}
	checkTestImage(t, got)
	if _, err := s.ResolveVerified(ctx, repo+":unsigned", []string{keyFile}, false); err == nil {
		t.Errorf("ResolveVerified resolved an unsigned image")
	}
}

func TestVerifyIndexSignature(t *testing.T) {
	reg := startRegistry(t)
	k := newKey(t)
	img := testImage(t)
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	repo := reg.host + "/signed/multi"
	r, _ := name.ParseReference(repo+":v1", name.Insecure)
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	id, _ := idx.Digest()
	push(t, sigTag(repo, id.String()), signatureImage(t, k, id.String()))
	s, _ := openStore(t)
	got, err := s.ResolveVerified(context.Background(), repo+":v1", []string{k.pubPEM}, false)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if got.Digest != d.String() {
		t.Errorf("digest %s, want the platform manifest %s", got.Digest, d)
	}
}

func TestVerifyLocal(t *testing.T) {
	k := newKey(t)
	img := testImage(t)
	d, _ := img.Digest()
	dir := writeLayout(t, img, "v1")
	s, _ := openStore(t)
	ctx := context.Background()
	ref := "oci-layout:" + dir + ":v1"
	if err := s.Verify(ctx, ref, []string{k.pubPEM}, false); err == nil || !strings.Contains(err.Error(), "allow_local") {
		t.Errorf("unsigned layout: %v", err)
	}
	if err := s.Verify(ctx, ref, []string{k.pubPEM}, true); err != nil {
		t.Errorf("allow_local: %v", err)
	}
	if err := s.Verify(ctx, "dir:"+t.TempDir(), []string{k.pubPEM}, false); err == nil {
		t.Errorf("dir: verified without allow_local")
	}
	// A signature copied into the layout next to the image.
	lp, _ := layout.FromPath(dir)
	tag := strings.Replace(d.String(), ":", "-", 1) + ".sig"
	if err := lp.AppendImage(signatureImage(t, k, d.String()), layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		t.Fatal(err)
	}
	got, err := s.ResolveVerified(ctx, ref, []string{k.pubPEM}, false)
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, got)
}
