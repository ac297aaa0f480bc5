package image

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// cosign's signature format (cosign 2's default, the ".sig" tag): one OCI
// manifest per signed digest, tagged sha256-HEX.sig in the image's
// repository; each layer is a simple-signing payload whose signature is in
// an annotation.
const (
	cosignPayloadType   = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSigAnnotation = "dev.cosignproject.cosign/signature"
	cosignClaimType     = "cosign container image signature"
	maxPayloadSize      = 1 << 20
)

// simpleSigning is the part of a simple-signing payload that is checked.
type simpleSigning struct {
	Critical struct {
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// Verify checks that ref carries a cosign signature, in the .sig tag
// format, by one of keys (PEM public keys, as text or file paths; any one
// suffices), on the image manifest that would run or on the index its tag
// points to. Verification is offline: no transparency log, no
// certificates. Local images (oci-layout:, docker-archive:, dir:) pass when
// allowLocal is set; otherwise an oci-layout: may hold its signature as a
// manifest tagged sha256-HEX.sig, and the others are refused. Mirrors apply
// first: the signature must be where the image is fetched from.
//
// Verify and a later Resolve of a tag may see different digests if the tag
// moves in between; ResolveVerified resolves exactly the verified digest.
func (s *Store) Verify(ctx context.Context, ref string, keys []string, allowLocal bool) error {
	_, err := s.verify(ctx, ref, keys, allowLocal)
	return err
}

// ResolveVerified verifies ref like Verify and resolves the digest that was
// verified.
func (s *Store) ResolveVerified(ctx context.Context, ref string, keys []string, allowLocal bool) (*Image, error) {
	pinned, err := s.verify(ctx, ref, keys, allowLocal)
	if err != nil {
		return nil, err
	}
	img, err := s.resolve(ctx, pinned)
	if err != nil {
		return nil, fmt.Errorf("resolving verified image %s (%s): %w", ref, pinned, err)
	}
	img.Ref, img.Source = ref, pinned
	return img, nil
}

// verify returns the reference, pinned by digest where it can be, whose
// signature was verified.
func (s *Store) verify(ctx context.Context, ref string, keys []string, allowLocal bool) (string, error) {
	pubs, err := loadKeys(keys)
	if err != nil {
		return "", fmt.Errorf("verifying signature of %s: %w", ref, err)
	}
	src := rewrite(s.opts.mirrors, ref)
	p, err := parseRef(src)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("verifying signature of image %s: %w", ref, err)
	}
	switch p.kind {
	case kindDir, kindDockerArchive:
		if allowLocal {
			return src, nil
		}
		return fail(errors.New("a local dir: or docker-archive: image carries no signature; set image_signatures.allow_local: true to use it"))
	case kindOCILayout:
		if allowLocal {
			return src, nil
		}
		ls, err := s.layoutSource(p)
		if err != nil {
			return fail(err)
		}
		lp, err := layout.FromPath(p.path)
		if err != nil {
			return fail(err)
		}
		for _, d := range candidates(ls) {
			h, _ := v1.NewHash(d)
			sigImg, err := layoutSigImage(lp, h)
			if err != nil {
				continue
			}
			if err := checkSignatures(sigImg, d, pubs); err == nil {
				s.logger.Info("image signature verified", "ref", ref, "digest", d)
				return prefixOCILayout + p.path + "@" + ls.digest, nil
			}
		}
		return fail(fmt.Errorf("no valid signature by the given keys in OCI layout %s for %s (set image_signatures.allow_local: true to allow unsigned local images)", p.path, strings.Join(candidates(ls), " or ")))
	}

	rs, err := s.registrySource(ctx, p.name)
	if err != nil {
		return fail(err)
	}
	ds := candidates(rs)
	if d, ok := p.name.(name.Digest); ok && !contains(ds, d.DigestStr()) {
		ds = append(ds, d.DigestStr())
	}
	var reasons []string
	for _, d := range ds {
		tag := p.name.Context().Tag(strings.Replace(d, ":", "-", 1) + ".sig")
		sigImg, err := remote.Image(tag, s.remoteOptions(ctx)...)
		if err != nil {
			var terr *transport.Error
			if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
				reasons = append(reasons, d+": no signature ("+tag.TagStr()+" not found)")
				continue
			}
			return fail(fmt.Errorf("fetching signature %s: %w", tag, err))
		}
		if err := checkSignatures(sigImg, d, pubs); err != nil {
			reasons = append(reasons, d+": "+err.Error())
			continue
		}
		s.logger.Info("image signature verified", "ref", ref, "digest", d)
		return p.name.Context().Digest(rs.digest).String(), nil
	}
	return fail(fmt.Errorf("no valid signature by the given keys (%s)", strings.Join(reasons, "; ")))
}

func candidates(src source) []string {
	ds := []string{src.digest}
	if src.indexDigest != "" {
		ds = append(ds, src.indexDigest)
	}
	return ds
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// layoutSigImage finds the manifest tagged sha256-HEX.sig in a layout.
func layoutSigImage(lp layout.Path, h v1.Hash) (v1.Image, error) {
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	tag := h.Algorithm + "-" + h.Hex + ".sig"
	for _, m := range im.Manifests {
		if t := m.Annotations["org.opencontainers.image.ref.name"]; t == tag || strings.HasSuffix(t, ":"+tag) {
			return lp.Image(m.Digest)
		}
	}
	return nil, fmt.Errorf("no %s", tag)
}

// checkSignatures succeeds when one layer of a cosign signature manifest is
// a payload for digest signed by one of pubs.
func checkSignatures(sigImg v1.Image, digest string, pubs []crypto.PublicKey) error {
	m, err := sigImg.Manifest()
	if err != nil {
		return fmt.Errorf("reading signature manifest: %w", err)
	}
	seen := 0
	for _, l := range m.Layers {
		if string(l.MediaType) != cosignPayloadType {
			continue
		}
		seen++
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[cosignSigAnnotation])
		if err != nil || len(sig) == 0 {
			continue
		}
		if l.Size > maxPayloadSize {
			continue
		}
		layer, err := sigImg.LayerByDigest(l.Digest)
		if err != nil {
			return fmt.Errorf("reading signature payload: %w", err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			return fmt.Errorf("reading signature payload: %w", err)
		}
		payload, err := io.ReadAll(io.LimitReader(rc, maxPayloadSize+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("reading signature payload: %w", err)
		}
		// The payload must be the blob the manifest names.
		if sum := sha256.Sum256(payload); l.Digest.Algorithm != "sha256" || fmt.Sprintf("%x", sum) != l.Digest.Hex {
			continue
		}
		if !verifyAny(pubs, payload, sig) {
			continue
		}
		var ss simpleSigning
		if err := json.Unmarshal(payload, &ss); err != nil {
			continue
		}
		if ss.Critical.Type == cosignClaimType && ss.Critical.Image.DockerManifestDigest == digest {
			return nil
		}
	}
	if seen == 0 {
		return errors.New("signature manifest holds no cosign simple-signing payload")
	}
	return fmt.Errorf("none of %d signatures is valid for %s with the given keys", seen, digest)
}

// verifyAny checks sig over payload with each key: ECDSA (ASN.1, or r‖s)
// and RSA PKCS#1 v1.5 sign the SHA-256 of the payload, Ed25519 the payload.
func verifyAny(pubs []crypto.PublicKey, payload, sig []byte) bool {
	h := sha256.Sum256(payload)
	for _, pub := range pubs {
		switch k := pub.(type) {
		case *ecdsa.PublicKey:
			if ecdsa.VerifyASN1(k, h[:], sig) {
				return true
			}
			if n := (k.Curve.Params().BitSize + 7) / 8; len(sig) == 2*n {
				r, s := new(big.Int).SetBytes(sig[:n]), new(big.Int).SetBytes(sig[n:])
				if ecdsa.Verify(k, h[:], r, s) {
					return true
				}
			}
		case *rsa.PublicKey:
			if rsa.VerifyPKCS1v15(k, crypto.SHA256, h[:], sig) == nil {
				return true
			}
		case ed25519.PublicKey:
			if ed25519.Verify(k, payload, sig) {
				return true
			}
		}
	}
	return false
}

// loadKeys reads PEM public keys given as text or as file paths.
func loadKeys(keys []string) ([]crypto.PublicKey, error) {
	if len(keys) == 0 {
		return nil, errors.New("image_signatures lists no keys")
	}
	var pubs []crypto.PublicKey
	for _, k := range keys {
		text, what := []byte(k), "inline key"
		if !strings.Contains(k, "-----BEGIN") {
			b, err := os.ReadFile(k)
			if err != nil {
				return nil, fmt.Errorf("reading key: %w", err)
			}
			text, what = b, k
		}
		blk, _ := pem.Decode(text)
		if blk == nil {
			return nil, fmt.Errorf("%s: no PEM block (expected a cosign.pub PUBLIC KEY)", what)
		}
		pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: parsing public key: %w", what, err)
		}
		switch pub.(type) {
		case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("%s: unsupported key type %T", what, pub)
		}
		pubs = append(pubs, pub)
	}
	return pubs, nil
}
