package server_test

import (
	"net/http"
	"testing"
)

// What no submitted spec may do, whatever the rules: read a server file
// outside datasets_dir (an opaque benchmark URI included), read another
// project's promoted datasets, name a worker's files or images, or run on
// the host rung. Each is refused and writes nothing.
func TestSubmitConfined(t *testing.T) {
	f := newFixture(t, nil)
	withDataset := func(d map[string]any) map[string]any {
		s := modelSpec("x", "ALPHA_KEY", "r1")
		s["dataset"] = d
		return s
	}
	withEnv := func(env map[string]any) map[string]any {
		s := agentSpec("deny", nil)
		s["environment"] = env
		return s
	}
	tests := []struct {
		name    string
		spec    map[string]any
		status  int
		mention string
	}{
		{"opaque URI out of datasets_dir", withDataset(map[string]any{"uri": "swebench:../outside/secret.jsonl"}), 400, "dataset.uri"},
		{"opaque URI to /etc", withDataset(map[string]any{"uri": "swebench:/etc/passwd"}), 400, "dataset.uri"},
		{"URI with an absolute path", withDataset(map[string]any{"uri": "swebench:///etc/passwd"}), 400, "dataset.uri"},
		{"another project's promoted dataset", withDataset(map[string]any{"path": "promoted/beta/" + betaSecret + ".jsonl"}), 400, "dataset.path"},
		{"another project's promoted dataset by URI", withDataset(map[string]any{"uri": "swebench://promoted/beta/" + betaSecret + ".jsonl"}), 400, "dataset.uri"},
		{"a worker file as script", func() map[string]any {
			s := modelSpec("x", "", "r1")
			s["target"] = map[string]any{"connector": "scripted", "model": "m", "script_file": "/root/.aws/credentials"}
			return s
		}(), 422, "file on the worker"},
		{"a worker directory as image", withEnv(map[string]any{"image": "dir:/"}), 422, "local image"},
		{"a mirror to a worker directory", withEnv(map[string]any{"image": "registry.corp/base:1", "image_mirrors": map[string]string{"registry.corp/base:1": "dir:/usr"}}), 422, "local image"},
		{"the host rung", withEnv(map[string]any{"sandbox": map[string]any{"ladder": []string{"host"}, "allow_unsafe_host": true}}), 422, "host rung"},
		{"a cgroup directory of the worker", withEnv(map[string]any{"sandbox": map[string]any{"cgroup": "/sys/fs/cgroup/x"}}), 422, "cgroup"},
		{"signature keys from worker files", withEnv(map[string]any{"sandbox": map[string]any{"image_signatures": map[string]any{"keys": []string{"/etc/evalsi/cosign.pub"}}}}), 422, "PEM"},
		{"too many trials", func() map[string]any {
			s := modelSpec("x", "ALPHA_KEY", "r1")
			s["trials"] = 300000
			return s
		}(), 422, "max_trials_per_run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot()
			r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": tt.spec})
			code := "refused"
			if tt.status == http.StatusBadRequest {
				code = "bad_request"
			}
			apiError(t, r, tt.status, code, tt.mention)
			if after := f.snapshot(); after != before {
				t.Errorf("a refused submit wrote something:\n%s", after)
			}
		})
	}
	// The project's own promoted dataset is fine.
	f.submit(alphaEditor, withDataset(map[string]any{"path": "promoted/alpha/mine.jsonl"}))
}
