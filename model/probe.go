package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"evals.si/trajectory"
)

// NativeTools is what ProbeNativeTools found out about an endpoint.
type NativeTools struct {
	// Supported is true when the endpoint returned a structured tool call.
	Supported bool
	// Reason says why, in a sentence fit for a log line or an error.
	Reason string
}

// ProbeTool is the one tool a probe offers. It takes no arguments.
const ProbeTool = "evalsi_probe"

// probeUser is the probe's user message. A scripted model server can match
// it with a rule (contains: "evalsi native tool probe") to play an endpoint
// with or without native tools.
const probeUser = "evalsi native tool probe: call the " + ProbeTool + " tool now, with no arguments, and write nothing else."

// ProbeNativeTools finds out whether the endpoint behind c supports native
// (API-level) tool calling, with one tiny call: a system and a user message
// asking for a call of ProbeTool, the tool's schema in the request, and at
// most 64 output tokens. The outcomes:
//
//   - the reply carries a structured tool call: supported;
//   - the endpoint rejects the request as invalid (HTTP 400, 404, 422 or
//     501), or the error mentions tools: unsupported. This is how vLLM
//     without --enable-auto-tool-choice, Ollama models without a tools
//     template and llama.cpp without --jinja answer a request with tools;
//   - the reply is text without a structured tool call: unsupported. The
//     server accepted the schema but has no tool-call parser for the model,
//     so a call comes back as text (the prompted protocols exist for this);
//   - any other failure (authentication, rate limits after retries, 5xx,
//     transport): an error, because nothing was learned about tools.
//
// tool_choice is not sent: model.Request has no such field, and servers
// without a tool parser reject a forced tool_choice for the same reason
// they cannot call tools, which the outcomes above already cover.
//
// The in-process scripted connector needs no call: its replies carry
// structured tool calls, so it supports native tools.
func ProbeNativeTools(ctx context.Context, c Connector, modelName string) (NativeTools, error) {
	if _, ok := unwrap(c).(*scripted); ok {
		return NativeTools{Supported: true, Reason: "the in-process scripted connector returns structured tool calls"}, nil
	}
	resp, err := c.Chat(ctx, Request{
		Model:     modelName,
		System:    "You are checking that tool calls work. Call the tool you are asked to call.",
		Messages:  []trajectory.Message{{Role: trajectory.RoleUser, Content: probeUser}},
		Tools:     []Tool{{Name: ProbeTool, Description: "Reports that tool calling works. Takes no arguments.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
		MaxTokens: 64,
	})
	if err != nil {
		if ctx.Err() != nil {
			return NativeTools{}, fmt.Errorf("probing native tool support: %w", ctx.Err())
		}
		if status, msg, ok := apiError(err); ok && (rejectsRequest(status) || mentionsTools(msg)) {
			return NativeTools{Reason: fmt.Sprintf("the endpoint rejected a request with tools (HTTP %d: %s)", status, oneLine(msg))}, nil
		}
		return NativeTools{}, fmt.Errorf("probing native tool support (one call with a tool): %w", err)
	}
	if n := len(resp.Message.ToolCalls); n > 0 {
		return NativeTools{Supported: true, Reason: fmt.Sprintf("the endpoint returned a structured call of %s", resp.Message.ToolCalls[0].Name)}, nil
	}
	return NativeTools{Reason: fmt.Sprintf("the endpoint accepted tools but replied with text and no structured tool call (%q): it has no tool-call parser for this model", oneLine(truncate(resp.Message.Content, 80)))}, nil
}

// apiError extracts the HTTP status and message of a provider API error.
func apiError(err error) (status int, msg string, ok bool) {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe.StatusCode, oe.Message + " " + oe.RawJSON(), true
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return ae.StatusCode, ae.RawJSON(), true
	}
	return 0, "", false
}

func rejectsRequest(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusNotImplemented:
		return true
	}
	return false
}

func mentionsTools(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "tool") || strings.Contains(m, "function call")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
