package domain

import (
	"encoding/json"
	"fmt"
)

// Schema is one tool as the model is offered it: tau2's openai_schema
// (the function's name, its docstring's description, and its parameters'
// JSON Schema as pydantic writes it), with the tool's type.
type Schema struct {
	Name        string
	Description string
	Parameters  json.RawMessage
	Type        ToolType
	Mutates     bool
}

// ParseTools reads one side ("agent" or "user") of a domain's tools.json,
// which scripts/tau2-reference/generate.py records from tau2's own
// toolkits: what the model is told about each tool is tau2's text.
func ParseTools(raw []byte, side string) ([]Schema, error) {
	var file map[string][]struct {
		Schema struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"schema"`
		Type    ToolType `json:"type"`
		Mutates bool     `json:"mutates"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("reading the tool schemas: %w", err)
	}
	list, ok := file[side]
	if !ok {
		return nil, fmt.Errorf("the tool schemas have no %q side", side)
	}
	out := make([]Schema, len(list))
	for i, t := range list {
		out[i] = Schema{Name: t.Schema.Function.Name, Description: t.Schema.Function.Description,
			Parameters: t.Schema.Function.Parameters, Type: t.Type, Mutates: t.Mutates}
	}
	return out, nil
}
