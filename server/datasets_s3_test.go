package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"evals.si/access"
	"evals.si/api"
	"evals.si/internal/testenv"
	"evals.si/internal/testenv/pgtest"
	"evals.si/internal/testenv/s3test"
	"evals.si/planner"
	"evals.si/regress"
	"evals.si/server"
	"evals.si/store/postgres"
)

// These tests run a server configured as a Kubernetes deployment is:
// storage.s3 in server.yaml, datasets_dir and blobs_dir in a real S3
// server's bucket (versitygw on loopback), a real PostgreSQL store. The
// server is built from the config by the functions evalsid serve calls.

func TestMain(m *testing.M) { pgtest.Main(m) }

const s3Datasets = "evalsi/datasets/"

// s3Config is server.yaml with both directories in the bucket.
func s3Config(srv *s3test.Server) string {
	return fmt.Sprintf(`store: {postgres_env: PG_DSN}
blobs_dir: s3://%[1]s/evalsi/blobs
datasets_dir: s3://%[1]s/evalsi/datasets
storage:
  s3: {endpoint: %[2]s, region: %[3]s, bucket: %[1]s, path_style: true, access_key_env: S3_ACCESS, secret_key_env: S3_SECRET}
`, srv.Bucket, srv.Endpoint, s3test.Region)
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// newS3Fixture is a server over the bucket of srv, whose datasets the
// test has put there.
func newS3Fixture(t *testing.T, srv *s3test.Server) *fixture {
	t.Helper()
	ctx := t.Context()
	cfg, err := server.LoadConfig(writeConfig(t, s3Config(srv)))
	if err != nil {
		t.Fatal(err)
	}
	getenv := envOf(map[string]string{"PG_DSN": pgtest.Start(t), "S3_ACCESS": srv.AccessKey, "S3_SECRET": srv.SecretKey})
	blobs, err := cfg.OpenBlobs(ctx, getenv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(ctx, getenv("PG_DSN"), blobs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	files, err := cfg.OpenDatasets(ctx, getenv)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.New(accessConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	datasets := planner.Datasets()
	datasets.ServeRuns(regress.NewRunSource(st, logger))
	skew := new(atomic.Int64)
	s, err := server.New(server.Options{
		Store: st, Access: acc, Records: &planner.Host{Datasets: datasets, Logger: logger},
		Datasets: files, Logger: logger,
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &fixture{t: t, srv: s, url: hs.URL, skew: skew}
}

func sha(b []byte) string {
	d := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(d[:])
}

// sweParquet is SWE-bench's published parquet form of the benchmark
// sample's one instance, and the instance's id.
func sweParquet(t *testing.T) ([]byte, string) {
	t.Helper()
	wd, _ := os.Getwd()
	p := filepath.Join(wd, "..", "..", "shared", "benchdata", "swebench", "swe-bench-dev-easy.sqlfluff__sqlfluff-2386.json")
	b, err := os.ReadFile(p)
	if err != nil {
		testenv.Missing(t, "the SWE-bench sample of ../shared/benchdata", err.Error())
	}
	var src []struct {
		Repo             string   `json:"repo"`
		InstanceID       string   `json:"instance_id"`
		BaseCommit       string   `json:"base_commit"`
		Patch            string   `json:"patch"`
		TestPatch        string   `json:"test_patch"`
		ProblemStatement string   `json:"problem_statement"`
		Version          string   `json:"version"`
		FailToPass       []string `json:"FAIL_TO_PASS"`
		PassToPass       []string `json:"PASS_TO_PASS"`
	}
	if err := json.Unmarshal(b, &src); err != nil || len(src) != 1 {
		t.Fatalf("decoding %s: %v", p, err)
	}
	type row struct {
		Repo             string `parquet:"repo"`
		InstanceID       string `parquet:"instance_id"`
		BaseCommit       string `parquet:"base_commit"`
		Patch            string `parquet:"patch"`
		TestPatch        string `parquet:"test_patch"`
		ProblemStatement string `parquet:"problem_statement"`
		Version          string `parquet:"version"`
		FailToPass       string `parquet:"FAIL_TO_PASS"`
		PassToPass       string `parquet:"PASS_TO_PASS"`
	}
	in := src[0]
	f2p, _ := json.Marshal(in.FailToPass)
	p2p, _ := json.Marshal(in.PassToPass)
	out := filepath.Join(t.TempDir(), "test.parquet")
	if err := parquet.WriteFile(out, []row{{in.Repo, in.InstanceID, in.BaseCommit, in.Patch, in.TestPatch, in.ProblemStatement, in.Version, string(f2p), string(p2p)}}); err != nil {
		t.Fatal(err)
	}
	pq, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return pq, in.InstanceID
}

// seedS3 puts the datasets the tests read, a secret beside datasets_dir
// (outside its prefix), and keys no dataset path can name.
func seedS3(t *testing.T, srv *s3test.Server) map[string][]byte {
	t.Helper()
	files := map[string][]byte{
		"shared.jsonl":                           []byte(`{"id":"s1","input":"shared question","expected":"a"}` + "\n"),
		"promoted/alpha/mine.jsonl":              []byte(`{"id":"m1","input":"alpha question"}` + "\n"),
		"promoted/beta/" + betaSecret + ".jsonl": []byte(`{"id":"` + betaSecret + `-rec","input":"` + betaSecret + ` content"}` + "\n"),
	}
	for name, b := range files {
		srv.Put(t, s3Datasets+name, b)
	}
	srv.Put(t, "evalsi/outside/secret.jsonl", []byte(`{"id":"x","input":"OUTSIDESECRET"}`+"\n"))
	srv.Put(t, "evalsi/datasets-sibling/secret.jsonl", []byte(`{"id":"x","input":"OUTSIDESECRET"}`+"\n"))
	return files
}

// TestS3Datasets: the listing shows the bucket's datasets with their
// content digests (another project's promoted ones hidden), a dataset is
// served whole and in ranges, a path out of the prefix is refused, and a
// replaced object gets a new version.
func TestS3Datasets(t *testing.T) {
	srv := s3test.Start(t)
	files := seedS3(t, srv)
	pq, _ := sweParquet(t)
	srv.Put(t, s3Datasets+"swe/test.parquet", pq)
	files["swe/test.parquet"] = pq
	f := newS3Fixture(t, srv)

	ds := decodeAs[api.DatasetList](t, f.do("GET", "/v1/datasets", alphaEditor, nil), http.StatusOK)
	got := map[string]api.Dataset{}
	for _, d := range ds.Datasets {
		got[d.Path] = d
	}
	for name, b := range files {
		d, ok := got[name]
		if strings.Contains(name, betaSecret) {
			if ok {
				t.Errorf("alpha's listing shows beta's promoted dataset %s", name)
			}
			continue
		}
		if !ok || d.Size != int64(len(b)) || d.Version != sha(b) {
			t.Errorf("listing has %s as %+v, want size %d version %s", name, d, len(b), sha(b))
		}
	}
	if len(got) != len(files)-1 {
		t.Errorf("listing = %+v, want the %d datasets", ds.Datasets, len(files)-1)
	}

	r := f.do("GET", "/v1/datasets/shared.jsonl", alphaEditor, nil)
	if r.status != http.StatusOK || string(r.body) != string(files["shared.jsonl"]) {
		t.Errorf("GET shared.jsonl = %s", r)
	}
	r = f.do("GET", "/v1/datasets/shared.jsonl", alphaEditor, nil, "Range", "bytes=2-5")
	if r.status != http.StatusPartialContent || string(r.body) != string(files["shared.jsonl"][2:6]) {
		t.Errorf("GET shared.jsonl bytes=2-5 = %s", r)
	}

	for _, p := range []string{
		"../outside/secret.jsonl", "..%2Foutside%2Fsecret.jsonl", "promoted/..%2F..%2Foutside/secret.jsonl",
		"%2E%2E/outside/secret.jsonl", "../datasets-sibling/secret.jsonl", "%2Fevalsi%2Foutside%2Fsecret.jsonl",
		"./shared.jsonl", "shared.jsonl/", "swe", "promoted/beta/" + betaSecret + ".jsonl", "nothing.jsonl",
	} {
		t.Run(p, func(t *testing.T) {
			r := f.do("GET", "/v1/datasets/"+p, alphaEditor, nil)
			if r.status < 400 || r.status >= 500 || strings.Contains(string(r.body), "OUTSIDESECRET") || strings.Contains(string(r.body), betaSecret+" content") {
				t.Fatalf("got %s, want a 4xx", r)
			}
		})
	}

	changed := []byte(`{"id":"s2","input":"changed"}` + "\n")
	srv.Put(t, s3Datasets+"shared.jsonl", changed)
	ds = decodeAs[api.DatasetList](t, f.do("GET", "/v1/datasets", alphaEditor, nil), http.StatusOK)
	i := slices.IndexFunc(ds.Datasets, func(d api.Dataset) bool { return d.Path == "shared.jsonl" })
	if i < 0 || ds.Datasets[i].Version != sha(changed) {
		t.Errorf("after replacing shared.jsonl the listing has %+v, want version %s", ds.Datasets, sha(changed))
	}
}

// TestS3Submit: a run over a .jsonl in the bucket records its records and
// the file's digest as its version; the artifacts a worker reports land
// in the bucket under blobs_dir; a run over SWE-bench's <dir>/test.parquet
// loads its instance; specs reaching out of the prefix or into another
// project's promoted datasets are refused.
func TestS3Submit(t *testing.T) {
	srv := s3test.Start(t)
	files := seedS3(t, srv)
	pq, instance := sweParquet(t)
	srv.Put(t, s3Datasets+"swe/test.parquet", pq)
	f := newS3Fixture(t, srv)

	sp := modelSpec("from-s3", "ALPHA_KEY")
	sp["dataset"] = map[string]any{"path": "shared.jsonl"}
	run := f.submit(alphaEditor, sp)
	if run.DatasetVersion != sha(files["shared.jsonl"]) {
		t.Errorf("dataset version %q, want %s", run.DatasetVersion, sha(files["shared.jsonl"]))
	}
	l := f.lease(workerTok, "w1", run.ID)
	if recordID(l) != "s1" {
		t.Fatalf("leased record %s, want s1", l.Record)
	}
	fin := finishBody(l, "answer")
	diff := "diff --git a/x b/x\n+a change the worker made\n"
	fin.Outcome.Diff = diff
	if r := f.do("POST", "/v1/worker/trials/"+l.TrialID+"/finish", workerTok, fin); r.status != http.StatusNoContent {
		t.Fatalf("finish: %s", r)
	}
	d := sha([]byte(diff))
	want := "evalsi/blobs/sha256/" + d[7:9] + "/" + d[7:]
	if keys := srv.Keys(t, "evalsi/blobs/"); !slices.Contains(keys, want) {
		t.Errorf("blobs in the bucket %v, want the diff artifact at %s", keys, want)
	}

	swe := agentSpec("deny", nil)
	swe["dataset"] = map[string]any{"uri": "swebench://swe"}
	r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": swe})
	if r.status != http.StatusCreated {
		t.Fatalf("submitting swebench://swe (test.parquet in S3): %s", r)
	}
	var sweRun api.Run
	if err := json.Unmarshal(r.body, &sweRun); err != nil {
		t.Fatal(err)
	}
	if l := f.lease(workerTok, "w1", sweRun.ID); recordID(l) != instance {
		t.Errorf("leased record %s, want %s", l.Record, instance)
	}

	withDataset := func(d map[string]any) map[string]any {
		s := modelSpec("x", "ALPHA_KEY", "r1")
		s["dataset"] = d
		return s
	}
	for name, sp := range map[string]map[string]any{
		"path out of the prefix":     withDataset(map[string]any{"path": "../outside/secret.jsonl"}),
		"path into a sibling prefix": withDataset(map[string]any{"path": "../datasets-sibling/secret.jsonl"}),
		"URI out of the prefix":      withDataset(map[string]any{"uri": "swebench:../outside/secret.jsonl"}),
		"absolute URI":               withDataset(map[string]any{"uri": "swebench:///evalsi/outside/secret.jsonl"}),
		"beta's promoted dataset":    withDataset(map[string]any{"path": "promoted/beta/" + betaSecret + ".jsonl"}),
		"beta's by URI":              withDataset(map[string]any{"uri": "swebench://promoted/beta/" + betaSecret + ".jsonl"}),
		"a file that is not there":   withDataset(map[string]any{"path": "nothing.jsonl"}),
	} {
		t.Run(name, func(t *testing.T) {
			r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": sp})
			apiError(t, r, http.StatusBadRequest, "bad_request", "spec.dataset")
			if strings.Contains(string(r.body), "OUTSIDESECRET") || strings.Contains(string(r.body), srv.Bucket) {
				t.Errorf("the refusal shows what is outside datasets_dir: %s", r)
			}
		})
	}
}

// TestS3ConfigErrors: a config naming S3 without storage.s3, or whose
// storage.s3 is incomplete or names another bucket, is refused with the
// file, the field and what to do; a key variable that is not set is
// refused when the server opens its storage, naming the variable, and no
// error ever shows a key.
func TestS3ConfigErrors(t *testing.T) {
	s3 := "storage:\n  s3: {endpoint: http://127.0.0.1:9, region: us-east-1, bucket: b, access_key_env: AK, secret_key_env: SK}\n"
	pg := "store: {postgres_env: PG}\n"
	tests := []struct {
		name, config string
		mentions     []string
	}{
		{"datasets_dir without storage.s3", pg + "blobs_dir: /b\ndatasets_dir: s3://b/d\n", []string{"datasets_dir", "storage.s3", "add storage"}},
		{"blobs_dir without storage.s3", pg + "blobs_dir: s3://b/x\n", []string{"blobs_dir", "storage.s3"}},
		{"another bucket", pg + "blobs_dir: s3://other/x\n" + s3, []string{"blobs_dir", `"other"`, "s3://b/"}},
		{"dot segment", pg + "blobs_dir: s3://b/x/../y\n" + s3, []string{"blobs_dir", "dot segment"}},
		{"credentials in the location", pg + "blobs_dir: s3://key:secret@b/x\n" + s3, []string{"blobs_dir", "not an S3 location"}},
		{"S3 blobs with SQLite", "store: {sqlite: x.db}\nblobs_dir: s3://b/x\n" + s3, []string{"blobs_dir", "PostgreSQL"}},
		{"blobs inside datasets", pg + "blobs_dir: s3://b/d/blobs\ndatasets_dir: s3://b/d\n" + s3, []string{"overlap"}},
		{"datasets at the bucket's root", pg + "blobs_dir: s3://b/blobs\ndatasets_dir: s3://b\n" + s3, []string{"overlap"}},
		{"blobs in a datasets directory", pg + "blobs_dir: /srv/d/blobs\ndatasets_dir: /srv/d\n", []string{"overlap"}},
		{"incomplete storage.s3", pg + "blobs_dir: s3://b/x\nstorage: {s3: {bucket: b}}\n", []string{"storage.s3 needs region, access_key_env, secret_key_env"}},
		{"endpoint with credentials", pg + "blobs_dir: /b\nstorage: {s3: {endpoint: 'http://k:s@h:1', region: r, bucket: b, access_key_env: AK, secret_key_env: SK}}\n", []string{"storage.s3.endpoint"}},
		{"unknown field", pg + "blobs_dir: /b\nstorage: {s3: {region: r, bucket: b, access_key_env: AK, secret_key_env: SK, secret_key: x}}\n", []string{"secret_key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeConfig(t, tt.config)
			_, err := server.LoadConfig(p)
			if err == nil {
				t.Fatal("LoadConfig succeeded")
			}
			for _, m := range append(tt.mentions, p) {
				if m == p && tt.name == "unknown field" {
					m = filepath.Base(p)
				}
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}

	p := writeConfig(t, pg+"blobs_dir: s3://b/blobs\ndatasets_dir: s3://b/datasets\n"+s3)
	cfg, err := server.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, env := range map[string]map[string]string{"AK": {"SK": "the-secret-key"}, "SK": {"AK": "the-access-key"}} {
		if _, err := cfg.OpenBlobs(ctx, envOf(env)); err == nil || !strings.Contains(err.Error(), name+", which is not set") || !strings.Contains(err.Error(), p) {
			t.Errorf("OpenBlobs without %s: %v", name, err)
		} else if strings.Contains(err.Error(), "the-secret-key") || strings.Contains(err.Error(), "the-access-key") {
			t.Errorf("the error shows a key: %v", err)
		}
		if _, err := cfg.OpenDatasets(ctx, envOf(env)); err == nil || !strings.Contains(err.Error(), name+", which is not set") {
			t.Errorf("OpenDatasets without %s: %v", name, err)
		}
	}

	// With the keys but the wrong secret, opening fails at once, without
	// showing the key.
	srv := s3test.Start(t)
	cfg, err = server.LoadConfig(writeConfig(t, s3Config(srv)))
	if err != nil {
		t.Fatal(err)
	}
	wrong := envOf(map[string]string{"S3_ACCESS": srv.AccessKey, "S3_SECRET": "wrong-secret-0123456789"})
	if _, err := cfg.OpenBlobs(ctx, wrong); err == nil || strings.Contains(err.Error(), "wrong-secret-0123456789") {
		t.Errorf("OpenBlobs with a wrong secret: %v", err)
	}
	if _, err := cfg.OpenDatasets(ctx, wrong); err == nil || strings.Contains(err.Error(), "wrong-secret-0123456789") {
		t.Errorf("OpenDatasets with a wrong secret: %v", err)
	}
}
