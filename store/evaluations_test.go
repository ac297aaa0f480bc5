package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

func TestEvaluationsRoundTripAndReset(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	run, tr := newTrial(t, s)
	_, other := newTrial(t, s)

	first := json.RawMessage(`[{"evaluator":"exact-match","scores":[{"name":"exact-match","value":1}]}]`)
	second := json.RawMessage(`[{"evaluator":"exact-match","error":"boom"}]`)
	if err := s.PutEvaluations(ctx, tr.ID, first); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEvaluations(ctx, tr.ID, second); err != nil {
		t.Fatalf("replacing evaluations: %v", err)
	}
	if err := s.PutEvaluations(ctx, other.ID, first); err != nil {
		t.Fatal(err)
	}
	got, err := s.Evaluations(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(got[tr.ID]) != string(second) {
		t.Fatalf("Evaluations(%s) = %s, want only %s: %s", run.ID, got, tr.ID, second)
	}

	if _, err := s.ResetTrial(ctx, tr.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Evaluations(ctx, run.ID); err != nil || len(got) != 0 {
		t.Fatalf("after reset: Evaluations = %v, %v; want none", got, err)
	}

	if err := s.PutEvaluations(ctx, tr.ID, json.RawMessage(`{`)); err == nil {
		t.Error("invalid JSON was stored")
	}
	if err := s.PutEvaluations(ctx, "t-nope", first); !errors.Is(err, ErrNotFound) {
		t.Errorf("evaluations of a missing trial: err = %v, want ErrNotFound", err)
	}
}
