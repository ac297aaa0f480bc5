package evaluate

import (
	"context"
	"sync"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// fakeJudge stands in for a model provider, which tests cannot reach: it
// answers call i with replies[i] (the last one repeating) and records every
// request so tests can check what the judge was told.
type fakeJudge struct {
	replies []string
	err     error

	mu   sync.Mutex
	reqs []model.Request
}

func (f *fakeJudge) Chat(_ context.Context, req model.Request) (model.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return model.Response{}, f.err
	}
	i := min(len(f.reqs)-1, len(f.replies)-1)
	return model.Response{
		Message: trajectory.Message{Role: trajectory.RoleAssistant, Content: f.replies[i]},
		Usage:   trajectory.Usage{InputTokens: 100, OutputTokens: 20},
		Model:   "fake-judge",
	}, nil
}

func (f *fakeJudge) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// record builds a record with a text input and an optional expected value.
func record(id, input string, expected any) spec.Record {
	r := spec.Record{ID: id, Input: spec.Input{Text: input}}
	if expected != nil {
		r.Expected = spec.MustJSON(expected)
	}
	return r
}

// scoreMap flattens scores by name for assertions.
func scoreMap(scores []Score) map[string]float64 {
	m := map[string]float64{}
	for _, s := range scores {
		m[s.Name] = s.Value
	}
	return m
}

func ptr[T any](v T) *T { return &v }
