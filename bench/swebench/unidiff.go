package swebench

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// This file ports the part of unidiff's PatchSet (unidiff 1.0.1, the
// version python/adapters/swebench pins) that the harness's eval-script
// builders read: which files a patch touches (source_file, target_file,
// path). get_modified_files and the calypso test commands use it, and a
// patch it cannot parse makes make_test_spec raise, so here it refuses.
// Lines are split as Python's StringIO iterates them: on "\n", kept.

var (
	udSource         = regexp.MustCompile(`^--- ("?[^\t\n]*"?)(?:\t([^\n]+))?`)
	udTarget         = regexp.MustCompile(`^\+\+\+ ("?[^\t\n]*"?)(?:\t([^\n]+))?`)
	udGitHeader      = regexp.MustCompile(`^diff --git ("?a/[^\t\n]+"?) ("?b/[^\t\n]+"?)`)
	udGitHeaderURI   = regexp.MustCompile(`^diff --git (.*://[^\t\n]+) (.*://[^\t\n]+)`)
	udGitHeaderNoPfx = regexp.MustCompile(`^diff --git ([^\t\n]+) ([^\t\n]+)`)
	// Python's $ also matches before a final "\n"; \d is any Unicode digit.
	udDeletedFile = regexp.MustCompile(`^deleted file mode (\p{Nd}+)\n?$`)
	udNewFile     = regexp.MustCompile(`^new file mode (\p{Nd}+)\n?$`)
	udOldMode     = regexp.MustCompile(`^old mode (\p{Nd}+)\n?$`)
	udNewMode     = regexp.MustCompile(`^new mode (\p{Nd}+)\n?$`)
	udIndex       = regexp.MustCompile(`^index [0-9a-f]+\.\.[0-9a-f]+ (\p{Nd}+)\n?$`)
	udHunkHeader  = regexp.MustCompile(`^@@ -(\p{Nd}+)(?:,(\p{Nd}+))? \+(\p{Nd}+)(?:,(\p{Nd}+))? @@[ ]?(.*)`)
	udNoNewline   = regexp.MustCompile(`^\\ No newline at end of file`)
	udBinary      = regexp.MustCompile(`^Binary files? ([^\t]+?)(?:\t([\s\p{Z}0-9:+-]+))?(?: and ([^\t]+?)(?:\t([\s\p{Z}0-9:+-]+))?)? (differ|has changed)`)
	udFilePrefix  = regexp.MustCompile(`^[abciow12]/`)
)

const devNull = "/dev/null"

// patchedFile is what the builders read of unidiff's PatchedFile.
type patchedFile struct {
	source, target string
	hunks          int
}

// path is PatchedFile.path: the file's path without its a/ or b/ prefix,
// the target's for an added or renamed file.
func (f *patchedFile) path() string {
	p := f.source
	rename := f.source != devNull && f.target != devNull && dropRunes(f.source, 2) != dropRunes(f.target, 2)
	if p == devNull || (rename && f.target != devNull) {
		p = f.target
	}
	quoted := strings.HasPrefix(p, `"`) && strings.HasSuffix(p, `"`)
	if quoted {
		p = p[1:max(1, len(p)-1)] // `"` alone becomes "", as in Python
	}
	if udFilePrefix.MatchString(p) {
		p = p[2:]
	}
	if quoted {
		p = `"` + p + `"`
	}
	return p
}

// parsePatchSet is PatchSet(patch) as far as file boundaries and names.
func parsePatchSet(patch string) ([]*patchedFile, error) {
	lines := strings.SplitAfter(patch, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var files []*patchedFile
	var cur *patchedFile
	inInfo := false // patch_info is not None
	var pendingSource *string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := firstMatch(line, udGitHeader, udGitHeaderURI, udGitHeaderNoPfx); m != nil {
			inInfo = true
			src := m[1]
			pendingSource = &src
			cur = &patchedFile{source: m[1], target: m[2]}
			files = append(files, cur)
			continue
		}
		if udNewFile.MatchString(line) {
			if cur == nil || !inInfo {
				return nil, fmt.Errorf("unexpected new file found: %s", line)
			}
			cur.source = devNull
			continue
		}
		if udDeletedFile.MatchString(line) {
			if cur == nil || !inInfo {
				return nil, fmt.Errorf("unexpected deleted file found: %s", line)
			}
			cur.target = devNull
			continue
		}
		if cur != nil && inInfo && (udOldMode.MatchString(line) || udNewMode.MatchString(line) || udIndex.MatchString(line)) {
			continue
		}
		if m := udSource.FindStringSubmatch(line); m != nil {
			src := m[1]
			pendingSource = &src
			if cur != nil && !inInfo {
				cur = nil
			}
			continue
		}
		if m := udTarget.FindStringSubmatch(line); m != nil {
			if cur != nil && cur.target != m[1] {
				return nil, fmt.Errorf("target without source: %s", line)
			}
			if cur == nil {
				if pendingSource == nil {
					return nil, fmt.Errorf("target without source: %s", line)
				}
				cur = &patchedFile{source: *pendingSource, target: m[1]}
				files = append(files, cur)
				inInfo = false
				pendingSource = nil
			}
			continue
		}
		if m := udHunkHeader.FindStringSubmatch(line); m != nil {
			inInfo = false
			if cur == nil {
				return nil, fmt.Errorf("unexpected hunk found: %s", line)
			}
			next, err := skipHunk(m, lines, i+1)
			if err != nil {
				return nil, err
			}
			cur.hunks++
			i = next - 1
			continue
		}
		if udNoNewline.MatchString(line) {
			if cur == nil || cur.hunks == 0 {
				return nil, fmt.Errorf("unexpected marker: %s", line)
			}
			continue
		}
		if line == "\n" && cur != nil && cur.hunks > 0 {
			continue
		}
		if !inInfo {
			cur = nil
			inInfo = true
		}
		if m := udBinary.FindStringSubmatch(line); m != nil {
			src := m[1]
			pendingSource = &src
			if cur == nil {
				target := m[3]
				if target == "" {
					target = m[1]
				}
				files = append(files, &patchedFile{source: m[1], target: target})
			}
			inInfo, cur = false, nil
			continue
		}
		if line == "GIT binary patch\n" {
			if cur == nil {
				return nil, fmt.Errorf("unexpected binary patch marker: %s", line)
			}
			inInfo, cur = false, nil
			continue
		}
	}
	return files, nil
}

// dropRunes is Python's s[n:]: strings index code points.
func dropRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[i:]
		}
		n--
	}
	return ""
}

func firstMatch(s string, res ...*regexp.Regexp) []string {
	for _, re := range res {
		if m := re.FindStringSubmatch(s); m != nil {
			return m
		}
	}
	return nil
}

// skipHunk is PatchedFile._parse_hunk: it consumes the hunk's lines from
// lines[i:] and returns the index after them.
func skipHunk(h []string, lines []string, i int) (int, error) {
	n := make([]int, 4)
	for k, s := range h[1:5] {
		switch {
		case s == "" && (k == 1 || k == 3):
			n[k] = 1 // a missing length is 1
		default:
			v, err := pyAtoi(s)
			if err != nil {
				return 0, fmt.Errorf("hunk header %q: %v", strings.TrimSpace(h[0]), err)
			}
			n[k] = v
		}
	}
	src, tgt := n[0], n[2]
	srcEnd, tgtEnd := src+n[1], tgt+n[3]
	for ; i < len(lines); i++ {
		line := lines[i]
		var typ byte
		switch {
		case line != "" && strings.ContainsRune(`- +\`, rune(line[0])):
			typ = line[0]
		case line != "" && (line[0] == '\r' || line[0] == '\n'):
			typ = ' '
		default:
			return 0, fmt.Errorf("hunk diff line expected: %s", line)
		}
		switch typ {
		case '+':
			tgt++
		case '-':
			src++
		case ' ':
			src++
			tgt++
		}
		if src > srcEnd || tgt > tgtEnd {
			return 0, errors.New("hunk is longer than expected")
		}
		if src == srcEnd && tgt == tgtEnd {
			return i + 1, nil
		}
	}
	if src < srcEnd || tgt < tgtEnd {
		return 0, errors.New("hunk is shorter than expected")
	}
	return i, nil
}

// pyAtoi is int() of a string of Unicode decimal digits (\d+ matched it).
// Unicode encodes each script's digits 0 to 9 in a contiguous run, so a
// digit's value is its distance from the start of its run of digits,
// modulo 10 (runs of several scripts' digits can abut).
func pyAtoi(s string) (int, error) {
	n := 0
	for _, r := range s {
		start := r
		for unicode.Is(unicode.Nd, start-1) {
			start--
		}
		if !unicode.Is(unicode.Nd, r) {
			return 0, fmt.Errorf("%q is not a decimal digit", r)
		}
		n = n*10 + int(r-start)%10
		if n > 1<<40 {
			return 0, fmt.Errorf("%s is too large a line number", s)
		}
	}
	return n, nil
}

// modifiedFiles is get_modified_files: the a/-prefixed sources of the
// files a patch changes that existed before it, prefix removed.
func modifiedFiles(patch string) ([]string, error) {
	files, err := parsePatchSet(patch)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if f.source != devNull && strings.HasPrefix(f.source, "a/") {
			out = append(out, f.source[2:])
		}
	}
	return out, nil
}
