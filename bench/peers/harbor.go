package main

import (
	"archive/zip"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	harborVersion = "0.25.0"
	// harborKnownRequires is Harbor 0.25.0's Requires-Python as its wheel
	// on PyPI states it; used only when the wheel cannot be fetched to read
	// it again.
	harborKnownRequires = ">=3.12"
)

// pythonVersion runs `python --version` and returns "3.11.7".
func pythonVersion(ctx context.Context, python string) (string, error) {
	out, err := exec.CommandContext(ctx, python, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("running %s --version: %w: %s", python, err, strings.TrimSpace(string(out)))
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "Python ")
	if !ok || v == "" {
		return "", fmt.Errorf("%s --version printed %q, want \"Python X.Y.Z\"", python, strings.TrimSpace(string(out)))
	}
	return v, nil
}

// harborRequiresPython reads Requires-Python from the harbor wheel's
// METADATA, fetching the wheel once into cacheDir with pip (for Python
// 3.12, since pip would refuse it for this machine's Python). It returns
// the specifier and where it was read.
func harborRequiresPython(ctx context.Context, python, cacheDir string) (string, string, error) {
	whl := filepath.Join(cacheDir, "harbor-"+harborVersion+"-py3-none-any.whl")
	if _, err := os.Stat(whl); err != nil {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return "", "", err
		}
		cmd := exec.CommandContext(ctx, python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
			"--python-version", "3.12", "-d", cacheDir, "harbor=="+harborVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("pip download harbor==%s: %w: %s", harborVersion, err, strings.TrimSpace(string(out)))
		}
	}
	req, err := wheelRequiresPython(whl)
	if err != nil {
		return "", "", err
	}
	return req, filepath.Base(whl), nil
}

// wheelRequiresPython is the Requires-Python field of a wheel's METADATA.
func wheelRequiresPython(path string) (string, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return "", fmt.Errorf("opening wheel %s: %w", path, err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".dist-info/METADATA") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return "", fmt.Errorf("reading %s in %s: %w", f.Name, path, err)
		}
		defer rc.Close()
		return metadataField(rc, "Requires-Python")
	}
	return "", fmt.Errorf("wheel %s has no .dist-info/METADATA", path)
}

// metadataField is the first header field of that name in core metadata
// (RFC 822 style: headers end at the first blank line).
func metadataField(r io.Reader, name string) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("metadata has no %s field", name)
}

// satisfies reports whether version meets a PEP 440 specifier set of
// plain numeric clauses (">=3.12", ">=3.10,<4"); other operators are an
// error rather than a guess.
func satisfies(version, spec string) (bool, error) {
	v, err := parseVersion(version)
	if err != nil {
		return false, err
	}
	for _, clause := range strings.Split(spec, ",") {
		clause = strings.TrimSpace(clause)
		if clause == "" {
			continue
		}
		var op string
		for _, o := range []string{">=", "<=", "==", "!=", ">", "<"} {
			if strings.HasPrefix(clause, o) {
				op = o
				break
			}
		}
		if op == "" {
			return false, fmt.Errorf("specifier %q: clause %q has no comparison operator", spec, clause)
		}
		w, err := parseVersion(strings.TrimSpace(strings.TrimPrefix(clause, op)))
		if err != nil {
			return false, fmt.Errorf("specifier %q: %w", spec, err)
		}
		c := compareVersions(v, w)
		ok := map[string]bool{">=": c >= 0, "<=": c <= 0, "==": c == 0, "!=": c != 0, ">": c > 0, "<": c < 0}[op]
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

func parseVersion(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("empty version")
	}
	var out []int
	for _, p := range strings.Split(s, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("version %q: %q is not a number (only numeric versions are compared)", s, p)
		}
		out = append(out, n)
	}
	return out, nil
}

// compareVersions compares release segments, missing ones as zero
// (3.12 == 3.12.0).
func compareVersions(a, b []int) int {
	for i := range max(len(a), len(b)) {
		x, y := 0, 0
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// harborPeer decides whether Harbor can run here. With this machine's
// Python too old for it, the result is an honest "not measured" row.
func harborPeer(ctx context.Context, o options) *result {
	res := &result{harness: "Harbor", version: harborVersion, sandbox: "docker (its environment)"}
	pyv, err := pythonVersion(ctx, o.python)
	if err != nil {
		res.skipped = "not measured: " + err.Error()
		return res
	}
	req, from, err := harborRequiresPython(ctx, o.python, filepath.Join(o.cache, "harbor-"+harborVersion+"-wheel"))
	if err != nil {
		req, from = harborKnownRequires, "its PyPI metadata, as recorded in bench/peers (the wheel could not be fetched: "+err.Error()+")"
	}
	return harborVerdict(res, pyv, req, from)
}

func harborVerdict(res *result, pyv, req, from string) *result {
	ok, err := satisfies(pyv, req)
	switch {
	case err != nil:
		res.skipped = fmt.Sprintf("not measured: cannot compare Python %s with harbor %s's Requires-Python %q: %v", pyv, harborVersion, req, err)
	case !ok:
		res.skipped = fmt.Sprintf("not measured: harbor %s requires Python %s; this machine has %s", harborVersion, req, pyv)
		res.notes = append(res.notes, "Requires-Python read from "+from+"; no other Python may be installed here")
	default:
		// Not built: no machine of this project has Python >= 3.12 to
		// develop and check a Harbor runner against.
		res.skipped = fmt.Sprintf("not measured: Python %s could install harbor %s, but bench/peers has no Harbor runner yet", pyv, harborVersion)
	}
	return res
}
