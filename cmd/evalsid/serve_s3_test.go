package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"evals.si/internal/testenv/s3test"
	"evals.si/internal/testenv/servertest"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
)

// TestServeS3 runs `evalsid serve` as on Kubernetes: datasets_dir and
// blobs_dir in an S3 bucket (versitygw on loopback), a worker process
// that shares no files with the server. A run over a .jsonl in the bucket
// completes, its version is the file's digest, and the model replies too
// large to keep inline are blobs in the bucket.
func TestServeS3(t *testing.T) {
	bucket := s3test.Start(t)
	records := ""
	for i := range 3 {
		records += fmt.Sprintf(`{"id":"q%d","input":"question %d","expected":"yes"}`+"\n", i, i)
	}
	bucket.Put(t, "evalsi/datasets/qa.jsonl", []byte(records))
	big := strings.Repeat("y", store.InlineLimit+1024)
	ms := httptest.NewServer(modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: big, InputTokens: 7, OutputTokens: 1}}}, nil))
	t.Cleanup(ms.Close)

	s := servertest.New(t, servertest.Options{
		Dirs: fmt.Sprintf(`blobs_dir: s3://%[1]s/evalsi/blobs
datasets_dir: s3://%[1]s/evalsi/datasets
storage:
  s3: {endpoint: %[2]s, region: %[3]s, bucket: %[1]s, path_style: true, access_key_env: E2E_S3_ACCESS, secret_key_env: E2E_S3_SECRET}
`, bucket.Bucket, bucket.Endpoint, s3test.Region),
		Config: `projects:
  - name: alpha
    members: [{user: ana, role: editor}]
tokens:
  - {name: ana, user: ana, project: alpha, token_env: E2E_ANA_TOKEN}
  - {name: w, service: worker, token_env: E2E_WORKER_TOKEN}
credentials:
  grants: {alpha: [E2E_MODEL_KEY]}
`,
		Env: []string{"E2E_ANA_TOKEN=" + anaToken, "E2E_WORKER_TOKEN=" + workerToken,
			"E2E_S3_ACCESS=" + bucket.AccessKey, "E2E_S3_SECRET=" + bucket.SecretKey},
	})
	setup := &serverSetup{s}
	s.Serve(t)
	setup.worker(t, "worker-a")
	f, err := spec.Parse("qa.yaml", fmt.Appendf(nil, "name: qa\ntarget: {connector: openai, model: m, base_url: %q, api_key_env: E2E_MODEL_KEY}\nevaluators: [exact-match]\ndataset: {path: qa.jsonl}\n", ms.URL+"/v1"))
	if err != nil {
		t.Fatal(err)
	}
	c := setup.client(t)
	run, err := c.Submit(context.Background(), "qa.yaml", f.Spec, "")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(records))
	if want := "sha256:" + hex.EncodeToString(sum[:]); run.DatasetVersion != want {
		t.Errorf("dataset version %q, want %s", run.DatasetVersion, want)
	}
	if got := follow(t, c, run.ID); got.Records != 3 || got.Errored != 0 {
		t.Errorf("summary %+v, want 3 records, none errored", got)
	}
	if keys := bucket.Keys(t, "evalsi/blobs/sha256/"); len(keys) == 0 {
		t.Errorf("no blobs in the bucket; the model replies of %d bytes should be there", len(big))
	}
}
