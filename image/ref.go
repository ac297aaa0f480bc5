package image

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Reference prefixes for local images.
const (
	prefixOCILayout     = "oci-layout:"
	prefixDockerArchive = "docker-archive:"
	prefixDir           = "dir:"
)

// kind says where an image comes from.
type kind int

const (
	kindRegistry kind = iota
	kindOCILayout
	kindDockerArchive
	kindDir
)

// parsedRef is a reference split into its parts.
type parsedRef struct {
	kind kind
	// registry references.
	name name.Reference
	// local references: an absolute path, and for oci-layout an optional tag
	// or digest selecting one manifest in index.json.
	path   string
	tag    string
	digest v1.Hash
}

// IsLocal reports whether ref names an image on the local filesystem
// (oci-layout:, docker-archive: or dir:) rather than one in a registry.
func IsLocal(ref string) bool {
	for _, p := range []string{prefixOCILayout, prefixDockerArchive, prefixDir} {
		if strings.HasPrefix(ref, p) {
			return true
		}
	}
	return false
}

// parseRef parses any of the supported reference forms.
func parseRef(ref string) (parsedRef, error) {
	switch {
	case ref == "":
		return parsedRef{}, fmt.Errorf("empty image reference: name a registry image (docker.io/library/python:3.13-slim), oci-layout:PATH, docker-archive:PATH or dir:PATH")
	case strings.HasPrefix(ref, prefixOCILayout):
		return parseOCILayout(strings.TrimPrefix(ref, prefixOCILayout))
	case strings.HasPrefix(ref, prefixDockerArchive):
		p, err := localPath(ref, strings.TrimPrefix(ref, prefixDockerArchive))
		return parsedRef{kind: kindDockerArchive, path: p}, err
	case strings.HasPrefix(ref, prefixDir):
		p, err := localPath(ref, strings.TrimPrefix(ref, prefixDir))
		return parsedRef{kind: kindDir, path: p}, err
	}
	n, err := parseRegistryRef(ref)
	if err != nil {
		return parsedRef{}, err
	}
	return parsedRef{kind: kindRegistry, name: n}, nil
}

// parseRegistryRef parses a registry reference. Plain HTTP is allowed for
// loopback registries only (see loopbackOnlyHTTP for how it is enforced).
func parseRegistryRef(ref string) (name.Reference, error) {
	n, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		// StrictValidation rejects references without a tag or digest;
		// accept them and mean :latest, as docker does.
		n, err = name.ParseReference(ref)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing image reference %q: %w (expected e.g. docker.io/library/python:3.13-slim, 127.0.0.1:5000/x:tag or NAME@sha256:HEX)", ref, err)
	}
	if isLoopbackHost(n.Context().RegistryStr()) {
		n, err = name.ParseReference(ref, name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("parsing image reference %q: %w", ref, err)
		}
	}
	return n, nil
}

// RegistryOf is the registry a reference's image is pulled from, as this
// package parses it (docker's normalisation: ubuntu → index.docker.io):
// host[:port], reached over HTTPS (port 443 when it names none), or for a
// loopback registry over plain HTTP too (port 80). It is "" for local
// references (oci-layout:, docker-archive:, dir:), and does not apply a
// store's mirrors.
func RegistryOf(ref string) (string, error) {
	if IsLocal(ref) {
		return "", nil
	}
	n, err := parseRegistryRef(ref)
	if err != nil {
		return "", err
	}
	return n.Context().RegistryStr(), nil
}

// parseOCILayout parses PATH[:tag|@digest].
func parseOCILayout(s string) (parsedRef, error) {
	r := parsedRef{kind: kindOCILayout}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		h, err := v1.NewHash(s[i+1:])
		if err != nil {
			return r, fmt.Errorf("parsing oci-layout:%s: bad digest %q: %w", s, s[i+1:], err)
		}
		r.digest = h
		s = s[:i]
	} else if i := strings.LastIndex(s, ":"); i >= 0 && !strings.Contains(s[i+1:], "/") {
		r.tag = s[i+1:]
		s = s[:i]
		if r.tag == "" {
			return r, fmt.Errorf("parsing oci-layout:%s: empty tag after ':'", s)
		}
	}
	p, err := localPath(prefixOCILayout+s, s)
	r.path = p
	return r, err
}

func localPath(ref, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("image reference %q names no path", ref)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return abs, nil
}

// isLoopbackHost reports whether a registry host[:port] is on loopback.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Rewrite applies mirrors to ref as WithMirrors does, for callers whose
// mirrors vary per environment rather than per store.
func Rewrite(mirrors map[string]string, ref string) string { return rewrite(mirrors, ref) }

// rewrite applies the first matching mirror: the longest key that equals ref
// or is a prefix of it ending at a reference boundary ('/', ':' or '@').
// Keys and refs are compared both as written and in canonical form
// (docker.io/library/python and python are the same repository).
func rewrite(mirrors map[string]string, ref string) string {
	if len(mirrors) == 0 || IsLocal(ref) {
		return ref
	}
	forms := []string{ref}
	if c := canonical(ref); c != ref {
		forms = append(forms, c)
	}
	best, bestKey := "", ""
	for key, target := range mirrors {
		for _, k := range []string{key, canonical(key)} {
			for _, f := range forms {
				rest, ok := strings.CutPrefix(f, k)
				if !ok || (rest != "" && !strings.ContainsRune("/:@", rune(rest[0])) && !strings.HasSuffix(k, "/")) {
					continue
				}
				if len(k) > len(bestKey) {
					best, bestKey = target+rest, k
				}
			}
		}
	}
	if bestKey == "" {
		return ref
	}
	return best
}

// canonical returns the fully qualified form of a reference or repository
// (python:3 → index.docker.io/library/python:3, python →
// index.docker.io/library/python), or s unchanged.
func canonical(s string) string {
	if strings.HasSuffix(s, "/") || IsLocal(s) {
		return s
	}
	r, err := name.ParseReference(s)
	if err != nil {
		return s
	}
	if strings.HasSuffix(s, ":"+r.Identifier()) || strings.HasSuffix(s, "@"+r.Identifier()) {
		return r.Name()
	}
	return r.Context().Name()
}
