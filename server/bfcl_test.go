package server_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/api"
	"evals.si/internal/testenv"
	"evals.si/internal/testenv/s3test"
)

// bfclSample is the shipped BFCL sample's files, by slash path relative to
// its directory.
func bfclSample(t *testing.T) map[string][]byte {
	t.Helper()
	wd, _ := os.Getwd()
	root := filepath.Join(wd, "..", "..", "shared", "benchdata", "bfcl")
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		testenv.Missing(t, "the BFCL sample of ../shared/benchdata", err.Error())
	}
	return files
}

// leasedBFCL checks the leased record is the BFCL entry id with its
// answer (possible_answer/ was read from data_dir).
func leasedBFCL(t *testing.T, l api.Lease, id string) {
	t.Helper()
	var rec struct {
		ID       string `json:"id"`
		Metadata struct {
			BFCL struct {
				Entry  struct{ ID string } `json:"entry"`
				Answer struct{ ID string } `json:"answer"`
			} `json:"bfcl"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(l.Record, &rec); err != nil {
		t.Fatal(err)
	}
	if b := rec.Metadata.BFCL; rec.ID != id || b.Entry.ID != id || b.Answer.ID != id {
		t.Errorf("leased %s, want %s with its entry and answer", l.Record, id)
	}
}

// bfclRefusals are submits a server refuses for a bfcl:// URI: data_dir is
// confined as any dataset path is, and without data_dir the server's own
// BFCL_DATA_DIR would pick the data.
func bfclRefusals(withDataset func(uri string) map[string]any) map[string]map[string]any {
	return map[string]map[string]any{
		"no data_dir":                withDataset("bfcl://simple_python"),
		"an empty data_dir":          withDataset("bfcl://simple_python?data_dir="),
		"data_dir out of datasets":   withDataset("bfcl://simple_python?data_dir=../outside"),
		"an absolute data_dir":       withDataset("bfcl://simple_python?data_dir=/etc"),
		"an unclean data_dir":        withDataset("bfcl://simple_python?data_dir=bfcl/../bfcl"),
		"another project's data_dir": withDataset("bfcl://simple_python?data_dir=promoted/beta"),
		"a data_dir not there":       withDataset("bfcl://simple_python?data_dir=nothing"),
		"opaque, no data_dir":        withDataset("bfcl:simple_python"),
	}
}

// A bfcl:// URI on a server reads its data_dir under datasets_dir, and
// only there: relative and clean, not through a symlink out, not another
// project's, never the server's BFCL_DATA_DIR. Refusals write nothing.
func TestSubmitBFCL(t *testing.T) {
	f := newFixture(t, nil)
	for name, b := range bfclSample(t) {
		p := filepath.Join(f.dir, "bfcl", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The server's environment names good data: it must still not be read.
	t.Setenv("BFCL_DATA_DIR", filepath.Join(f.dir, "bfcl"))
	withDataset := func(uri string) map[string]any {
		s := modelSpec("bfcl", "ALPHA_KEY")
		s["dataset"] = map[string]any{"uri": uri}
		return s
	}

	run := f.submit(alphaEditor, withDataset("bfcl://live_parallel?data_dir=bfcl&ids=live_parallel_3-0-3"))
	leasedBFCL(t, f.lease(workerTok, "w1", run.ID), "live_parallel_3-0-3")

	cases := bfclRefusals(withDataset)
	cases["data_dir through a symlink out"] = withDataset("bfcl://simple_python?data_dir=escape-dir")
	for name, sp := range cases {
		t.Run(name, func(t *testing.T) {
			before := f.snapshot()
			r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": sp})
			t.Logf("%s", r.body)
			apiError(t, r, http.StatusBadRequest, "bad_request", "dataset.uri")
			if strings.HasPrefix(name, "no data_dir") || strings.HasPrefix(name, "opaque") {
				apiError(t, r, http.StatusBadRequest, "bad_request", "names no data_dir", "BFCL_DATA_DIR is not read")
			}
			if strings.Contains(string(r.body), f.dir) {
				t.Errorf("the refusal shows datasets_dir's path: %s", r)
			}
			if after := f.snapshot(); after != before {
				t.Errorf("a refused submit wrote something:\n%s", after)
			}
		})
	}
}

// With datasets_dir in S3, a bfcl:// URI's data_dir (the entries and
// possible_answer/) is copied out for the importer, as any dataset's
// files are; the same refusals hold.
func TestS3SubmitBFCL(t *testing.T) {
	srv := s3test.Start(t)
	seedS3(t, srv)
	for name, b := range bfclSample(t) {
		srv.Put(t, s3Datasets+"bfcl/"+name, b)
	}
	f := newS3Fixture(t, srv)
	t.Setenv("BFCL_DATA_DIR", t.TempDir())
	withDataset := func(uri string) map[string]any {
		s := modelSpec("bfcl", "ALPHA_KEY")
		s["dataset"] = map[string]any{"uri": uri}
		return s
	}

	run := f.submit(alphaEditor, withDataset("bfcl://multi_turn_base?data_dir=bfcl&ids=multi_turn_base_2"))
	leasedBFCL(t, f.lease(workerTok, "w1", run.ID), "multi_turn_base_2")

	for name, sp := range bfclRefusals(withDataset) {
		t.Run(name, func(t *testing.T) {
			r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": sp})
			apiError(t, r, http.StatusBadRequest, "bad_request", "dataset.uri")
			if strings.Contains(string(r.body), srv.Bucket) {
				t.Errorf("the refusal shows the bucket: %s", r)
			}
		})
	}
}
