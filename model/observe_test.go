package model_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// TestCallObserver: a connector from New reports each call to the
// context's observer, stamped with its provider, and a failed call with an
// error type a trace backend can group by.
func TestCallObserver(t *testing.T) {
	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error": {"message": "slow down", "type": "rate_limit"}}`))
	}))
	defer status.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + lis.Addr().String()
	lis.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id": "chatcmpl-42", "object": "chat.completion", "model": "gpt-served", "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}`))
	}))
	defer ok.Close()
	zero := 0
	env := func(string) string { return "key" }
	cases := []struct {
		name    string
		ref     spec.ModelRef
		errType string // "" for success
		id      string
	}{
		{"success", spec.ModelRef{Connector: "openai", Model: "gpt-asked", BaseURL: ok.URL, MaxRetries: &zero}, "", "chatcmpl-42"},
		{"http status", spec.ModelRef{Connector: "openai", Model: "gpt-asked", BaseURL: status.URL, MaxRetries: &zero}, "429", ""},
		{"refused", spec.ModelRef{Connector: "openai", Model: "gpt-asked", BaseURL: closed, MaxRetries: &zero}, "connection", ""},
		{"scripted", spec.ModelRef{Connector: "scripted", Model: "s", Script: &spec.Script{Default: []spec.ScriptReply{{Content: "x"}}}}, "", "scripted-r-1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := model.New(c.ref, model.Options{Getenv: env})
			if err != nil {
				t.Fatal(err)
			}
			var calls []model.Call
			ctx := model.WithCallObserver(context.Background(), func(call model.Call) { calls = append(calls, call) })
			resp, err := conn.Chat(ctx, model.Request{RecordID: "r", Messages: []trajectory.Message{{Role: "user", Content: "hello"}}})
			if len(calls) != 1 {
				t.Fatalf("%d calls observed, want 1", len(calls))
			}
			call := calls[0]
			if call.Provider != c.ref.Connector || call.RequestModel != c.ref.Model || call.End.Before(call.Start) {
				t.Errorf("call %+v", call)
			}
			if c.errType != "" {
				if err == nil || call.Err == nil || model.ErrorType(call.Err) != c.errType {
					t.Errorf("error %v, type %q, want type %s", err, model.ErrorType(call.Err), c.errType)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.ID != c.id || resp.Provider != c.ref.Connector || call.Response.ID != c.id {
				t.Errorf("response id %q provider %q, want %q %q", resp.ID, resp.Provider, c.id, c.ref.Connector)
			}
		})
	}
}
