// Package model holds the model connectors (OpenAI-compatible, Anthropic,
// scripted), usage and pricing.
package model

import (
	"context"
	"encoding/json"

	"evals.si/trajectory"
)

// Connector makes one chat call with tools.
type Connector interface {
	Chat(ctx context.Context, req Request) (Response, error)
}

// Request is one chat call.
type Request struct {
	// Model overrides the connector's configured model when set.
	Model    string
	System   string
	Messages []trajectory.Message
	Tools    []Tool
	// MaxTokens and Temperature override the connector's defaults when set.
	MaxTokens   int
	Temperature *float64
	// RecordID lets the scripted connector pick the record's script; real
	// connectors ignore it.
	RecordID string
	// Trial is the trial index; the scripted connector looks up
	// "<record>/<trial>" before "<record>".
	Trial int
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments object.
	Parameters json.RawMessage
}

// Response is the assistant's turn.
type Response struct {
	Message    trajectory.Message
	Usage      trajectory.Usage
	StopReason string
	Model      string
	// ID is the provider's id of the response (a chat completion's or
	// message's id), when it gives one.
	ID string
	// Provider is the connector that answered (openai, anthropic,
	// scripted), set by connectors from New.
	Provider string
}
