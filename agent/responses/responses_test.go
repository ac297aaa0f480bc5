package responses_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"evals.si/agent"
	"evals.si/agent/remote/remotetest"
	"evals.si/agent/responses"
	"evals.si/model"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/trajectory"
)

// TestResponsesTwoTurns: the second turn's reply is the script's second
// reply only when the scripted server sees the first response's items
// through previous_response_id (it counts assistant turns in the stored
// conversation), and the request carries that id.
func TestResponsesTwoTurns(t *testing.T) {
	ms := modelserver.New(&spec.Script{Default: []spec.ScriptReply{
		{Content: "Paris", InputTokens: 10, OutputTokens: 2},
		{Content: "Berlin", InputTokens: 20, OutputTokens: 3, ToolCalls: []spec.ScriptToolCall{{Name: "lookup", Arguments: spec.JSON(`{"city":"Berlin"}`)}}},
	}}, nil)
	ts := httptest.NewServer(ms)
	defer ts.Close()
	a, err := responses.New(spec.ResponsesAgent{BaseURL: ts.URL + "/v1", Model: "agent-1", APIKeyEnv: "AGENT_KEY"},
		model.Options{Getenv: remotetest.Env(map[string]string{"AGENT_KEY": "sk-test"})}, model.DefaultPricing())
	if err != nil {
		t.Fatal(err)
	}
	evs, sink := remotetest.Collect()
	res, err := a.Run(context.Background(), agent.Task{RecordID: "r1", Instruction: "capital of France?", Emit: sink, User: &remotetest.User{Replies: []string{"and Germany?"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "Berlin" || res.Steps != 2 || res.StopReason != agent.StopAnswered {
		t.Errorf("result = %+v", res)
	}
	if res.Usage != (trajectory.Usage{InputTokens: 30, OutputTokens: 5}) {
		t.Errorf("usage = %+v", res.Usage)
	}
	reqs := ms.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	var first, second struct {
		Model              string          `json:"model"`
		Input              json.RawMessage `json:"input"`
		PreviousResponseID string          `json:"previous_response_id"`
	}
	_ = json.Unmarshal(reqs[0].Body, &first)
	_ = json.Unmarshal(reqs[1].Body, &second)
	if first.PreviousResponseID != "" || first.Model != "agent-1" || string(first.Input) != `"capital of France?"` {
		t.Errorf("first request = %+v", first)
	}
	if second.PreviousResponseID == "" || string(second.Input) != `"and Germany?"` {
		t.Errorf("second request = %+v, want previous_response_id and only the new message", second)
	}
	if reqs[0].Path != "/v1/responses" || reqs[0].Header.Get("Authorization") != "REDACTED" {
		t.Errorf("path %s, Authorization %q", reqs[0].Path, reqs[0].Header.Get("Authorization"))
	}
	for _, e := range *evs {
		if e.Kind == trajectory.KindToolCall && (e.ToolCall.Name != "lookup" || string(e.ToolCall.Arguments) != `{"city":"Berlin"}`) {
			t.Errorf("tool call = %+v", e.ToolCall)
		}
	}
	want := "message,model_call,message,message,model_call,message,tool_call,stop"
	if got := remotetest.Kinds(*evs); got != want {
		t.Errorf("events = %s\nwant     %s", got, want)
	}
}

func TestResponsesInfraErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"4xx", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error": {"message": "bad model", "type": "invalid_request_error"}}`))
		}, "400"},
		{"malformed reply", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object": "response"`))
		}, "responses"},
		{"failed response", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id": "resp_1", "object": "response", "status": "failed", "output": [], "error": {"code": "server_error", "message": "overloaded"}}`))
		}, "overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(tc.handler)
			defer ts.Close()
			a, err := responses.New(spec.ResponsesAgent{BaseURL: ts.URL, Model: "m"}, model.Options{}, model.DefaultPricing())
			if err != nil {
				t.Fatal(err)
			}
			_, sink := remotetest.Collect()
			res, err := a.Run(context.Background(), agent.Task{RecordID: "r", Instruction: "q", Emit: sink})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			if res.StopReason != agent.StopError {
				t.Errorf("stop reason %q", res.StopReason)
			}
		})
	}
}

func TestResponsesNewRefusesBadSpecs(t *testing.T) {
	for _, cfg := range []spec.ResponsesAgent{
		{BaseURL: "api.example", Model: "m"},
		{BaseURL: "http://127.0.0.1:1"},
		{BaseURL: "http://127.0.0.1:1", Model: "m", APIKeyEnv: "UNSET_KEY"},
	} {
		if _, err := responses.New(cfg, model.Options{Getenv: remotetest.Env(nil)}, model.DefaultPricing()); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
