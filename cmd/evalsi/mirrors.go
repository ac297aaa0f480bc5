package main

import (
	"fmt"
	"sort"
	"strings"

	"evals.si/spec"
)

// imageMirrors collects repeated --image-mirror FROM=TO flags: image
// references (or prefixes of them) and what replaces them, as in
// environment.image_mirrors.
type imageMirrors map[string]string

func (m imageMirrors) String() string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (m imageMirrors) Set(v string) error {
	from, to, ok := strings.Cut(v, "=")
	from, to = strings.TrimSpace(from), strings.TrimSpace(to)
	if !ok || from == "" || to == "" {
		return fmt.Errorf("want FROM=TO, e.g. ubuntu:24.04=oci-layout:/var/cache/evalsi/images/debian-bookworm or docker.io/=mirror.example:5000/")
	}
	if prev, dup := m[from]; dup && prev != to {
		return fmt.Errorf("%s is mirrored twice (to %s and to %s)", from, prev, to)
	}
	m[from] = to
	return nil
}

func (m imageMirrors) Type() string { return "FROM=TO" }

// apply adds the flags to the spec's environment.image_mirrors, a flag
// winning over the spec for the same key. A record's own
// metadata.environment.image_mirrors still lays over the result key by
// key, as it does over the spec.
func (m imageMirrors) apply(s *spec.Spec) {
	if len(m) == 0 {
		return
	}
	if s.Environment == nil {
		s.Environment = &spec.Environment{}
	}
	if s.Environment.ImageMirrors == nil {
		s.Environment.ImageMirrors = map[string]string{}
	}
	for k, v := range m {
		s.Environment.ImageMirrors[k] = v
	}
}
