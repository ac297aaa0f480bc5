package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/goccy/go-yaml"

	"evals.si/spec"
	"evals.si/trajectory"
)

// ScriptedModel is the model name a scripted connector reports when the
// ModelRef names none.
const ScriptedModel = "scripted"

// SelectReply picks a scripted reply. The list is Records[recordID] when
// that record has one, else the first rule whose Contains occurs in
// firstUser, else Default. The reply is the one at index assistantTurns
// (the number of assistant turns already in the conversation); the last one
// repeats. Because the choice depends only on the conversation, replies are
// deterministic under any concurrency. The model server uses this too.
func SelectReply(s *spec.Script, recordID, firstUser string, assistantTurns int) (spec.ScriptReply, error) {
	if s == nil {
		return spec.ScriptReply{}, errors.New("script: no script")
	}
	var replies []spec.ScriptReply
	if recordID != "" {
		replies = s.Records[recordID]
	}
	if len(replies) == 0 {
		// Rules are matched case-sensitively: scripts are written against
		// known prompts, and an exact substring is the least surprising rule.
		for _, r := range s.Rules {
			if r.Contains != "" && len(r.Replies) > 0 && strings.Contains(firstUser, r.Contains) {
				replies = r.Replies
				break
			}
		}
	}
	if len(replies) == 0 {
		replies = s.Default
	}
	if len(replies) == 0 {
		return spec.ScriptReply{}, fmt.Errorf("script: no reply for record %q and first user message %q: no record entry or rule matches and default is empty (add a default list)", recordID, truncate(firstUser, 80))
	}
	i := assistantTurns
	if i < 0 {
		i = 0
	}
	if i >= len(replies) {
		i = len(replies) - 1
	}
	return replies[i], nil
}

// ScriptReply picks the scripted reply for a conversation of trajectory
// messages; see SelectReply.
func ScriptReply(s *spec.Script, recordID string, msgs []trajectory.Message) (spec.ScriptReply, error) {
	return SelectReply(s, recordID, FirstUser(msgs), AssistantTurns(msgs))
}

// FirstUser returns the content of the first user message.
func FirstUser(msgs []trajectory.Message) string {
	for _, m := range msgs {
		if m.Role == trajectory.RoleUser {
			return m.Content
		}
	}
	return ""
}

// AssistantTurns counts the assistant messages.
func AssistantTurns(msgs []trajectory.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == trajectory.RoleAssistant {
			n++
		}
	}
	return n
}

// ScriptToolCallID is the stable id of the i-th tool call (from 0) of the
// reply at step (from 1): "call_<step>_<i>".
func ScriptToolCallID(step, i int) string { return fmt.Sprintf("call_%d_%d", step, i) }

// ToolCallArguments returns a scripted call's arguments as compact JSON
// text. Absent arguments are {}; a JSON string holding a JSON value (YAML
// authors often quote it) is unwrapped.
func ToolCallArguments(a spec.JSON) json.RawMessage {
	if a.IsZero() {
		return json.RawMessage(`{}`)
	}
	raw := []byte(a)
	var s string
	if err := json.Unmarshal(a, &s); err == nil && json.Valid([]byte(s)) {
		raw = []byte(s)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return json.RawMessage(bytes.TrimSpace(raw))
	}
	return buf.Bytes()
}

// EstimateTokens is the scripted token estimate: a quarter of the
// characters, at least 1.
func EstimateTokens(chars int) int {
	if n := chars / 4; n > 0 {
		return n
	}
	return 1
}

// LoadScript reads a script from a YAML (or JSON) file.
func LoadScript(path string) (*spec.Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	return s, nil
}

// ParseScript decodes a script from YAML or JSON. Unknown fields are an
// error so that a misspelt key does not silently drop replies.
func ParseScript(data []byte) (*spec.Script, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parsing YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var s spec.Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decoding script (fields: default, records, rules): %w", err)
	}
	if len(s.Default) == 0 && len(s.Records) == 0 && len(s.Rules) == 0 {
		return nil, errors.New("script is empty: give at least one of default, records or rules")
	}
	return &s, nil
}

// scripted is the in-process scripted connector.
type scripted struct {
	script *spec.Script
	model  string
}

func newScripted(ref spec.ModelRef, opts Options) (*scripted, error) {
	s := ref.Script
	if s == nil && ref.ScriptFile != "" {
		var err error
		if s, err = LoadScript(resolvePath(opts.BaseDir, ref.ScriptFile)); err != nil {
			return nil, fmt.Errorf("model: scripted connector: %w", err)
		}
	}
	if s == nil {
		return nil, errors.New("model: scripted connector needs script or script_file")
	}
	m := ref.Model
	if m == "" {
		m = ScriptedModel
	}
	return &scripted{script: s, model: m}, nil
}

// Chat returns the scripted reply. Status replies (HTTP failures for the
// model server's retry tests) have no meaning in process and are answered
// with their content.
func (c *scripted) Chat(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	// A trial-specific entry "<record>/<trial>" wins over the record's own,
	// so trials of one record can be scripted to differ (pass^k tests).
	rec := req.RecordID
	if rec != "" {
		if k := fmt.Sprintf("%s/%d", rec, req.Trial); len(c.script.Records[k]) > 0 {
			rec = k
		}
	}
	r, err := ScriptReply(c.script, rec, req.Messages)
	if err != nil {
		return Response{}, fmt.Errorf("scripted model: %w", err)
	}
	step := AssistantTurns(req.Messages) + 1
	msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: r.Content}
	out := len(r.Content)
	for i, tc := range r.ToolCalls {
		args := ToolCallArguments(tc.Arguments)
		msg.ToolCalls = append(msg.ToolCalls, trajectory.ToolCall{ID: ScriptToolCallID(step, i), Name: tc.Name, Arguments: args})
		out += len(tc.Name) + len(args)
	}
	in := len(req.System)
	for _, m := range req.Messages {
		in += len(m.Content)
		for _, tc := range m.ToolCalls {
			in += len(tc.Name) + len(tc.Arguments)
		}
	}
	u := trajectory.Usage{InputTokens: EstimateTokens(in), OutputTokens: EstimateTokens(out)}
	if r.InputTokens > 0 {
		u.InputTokens = r.InputTokens
	}
	if r.OutputTokens > 0 {
		u.OutputTokens = r.OutputTokens
	}
	stop := "end_turn"
	if len(msg.ToolCalls) > 0 {
		stop = "tool_use"
	}
	model := req.Model
	if model == "" {
		model = c.model
	}
	// The id is deterministic, as the replies are: the record's script and
	// the turn.
	id := fmt.Sprintf("scripted-%s-%d", cmpOr(rec, "default"), step)
	return Response{Message: msg, Usage: u, StopReason: stop, Model: model, ID: id}, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// truncate shortens s to at most n runes for error messages.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
