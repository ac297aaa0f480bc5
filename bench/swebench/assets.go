package swebench

import (
	"encoding/json"
	"fmt"
	"strings"
)

// image_assets (SWE-bench Multimodal) name binary files the test patch
// needs but a text diff cannot carry, such as PNG baselines of visual tests:
// {"test_patch": [{"path": "test/x.png", "url": "https://…"}]}, as an
// object or a JSON string of one. SWE-bench's only consumer of the field,
// get_download_img_commands (test_spec/javascript.py), downloads each file
// inside the eval script, after the test files are reset and before the
// test patch is applied:
//
//	mkdir -p <parent of path>
//	curl -o <path> <url>
//	chmod 777 <path>
//
// The same lines go in the same place here: before the line that applies
// the test patch (the EOF_114329324912 heredoc). So the files come from
// their URLs at grading time, as with the harness, and a sandbox without
// network to those hosts grades without them (the tests then fail, as
// they would for the harness).

// imageAsset is one entry of image_assets["test_patch"].
type imageAsset struct {
	Path string `json:"path"`
	URL  string `json:"url"`
}

// parseImageAssets decodes image_assets: absent, null, "" and {} mean
// none.
func parseImageAssets(raw json.RawMessage) ([]imageAsset, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" || s == `""` {
		return nil, nil
	}
	if strings.HasPrefix(s, `"`) {
		var inner string
		if err := json.Unmarshal(raw, &inner); err != nil {
			return nil, fmt.Errorf("image_assets: %w", err)
		}
		if strings.TrimSpace(inner) == "" {
			return nil, nil
		}
		raw = json.RawMessage(inner)
	}
	var v struct {
		TestPatch []imageAsset `json:"test_patch"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf(`image_assets: want {"test_patch": [{"path": …, "url": …}]}: %w`, err)
	}
	for i, a := range v.TestPatch {
		if a.Path == "" || a.URL == "" {
			return nil, fmt.Errorf("image_assets.test_patch[%d]: path and url are both required", i)
		}
	}
	return v.TestPatch, nil
}

// downloadCommands is get_download_img_commands: the lines are formatted
// as the Python f-strings write them, unquoted.
func downloadCommands(assets []imageAsset) []string {
	var cmds []string
	for _, a := range assets {
		cmds = append(cmds,
			"mkdir -p "+pyPathParent(a.Path),
			"curl -o "+a.Path+" "+a.URL,
			"chmod 777 "+a.Path,
		)
	}
	return cmds
}

// pyPathParent is str(pathlib.PurePosixPath(p).parent): empty and "."
// components dropped, ".." kept, a leading "//" (exactly two) preserved,
// "." for a bare name.
func pyPathParent(p string) string {
	root := ""
	switch {
	case strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "///"):
		root = "//"
	case strings.HasPrefix(p, "/"):
		root = "/"
	}
	var parts []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	if len(parts) > 0 {
		parts = parts[:len(parts)-1]
	}
	if root == "" && len(parts) == 0 {
		return "."
	}
	return root + strings.Join(parts, "/")
}

// testPatchHeredoc opens the heredoc that carries the test patch in every
// eval script the harness writes.
const testPatchHeredoc = "<<'EOF_114329324912'"

// insertDownloads puts the download lines before the eval script's test
// patch line.
func insertDownloads(lines []string, assets []imageAsset) ([]string, error) {
	if len(assets) == 0 {
		return lines, nil
	}
	for i, l := range lines {
		if strings.Contains(l, "git apply") && strings.Contains(l, testPatchHeredoc) {
			out := append([]string{}, lines[:i]...)
			out = append(out, downloadCommands(assets)...)
			return append(out, lines[i:]...), nil
		}
	}
	return nil, fmt.Errorf("the instance has image_assets but its eval script has no test patch line (git apply … %s) to download them before", testPatchHeredoc)
}
