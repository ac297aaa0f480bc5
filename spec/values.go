package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// JSON is an arbitrary JSON value kept as raw bytes, so that it deep-copies
// and round-trips exactly (the role apiextensions' JSON plays in CRDs).
type JSON []byte

// MarshalJSON returns the raw value, or null when empty.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

// UnmarshalJSON keeps a copy of the raw value.
func (j *JSON) UnmarshalJSON(b []byte) error {
	if !json.Valid(b) {
		return fmt.Errorf("invalid JSON value")
	}
	*j = append((*j)[:0], b...)
	return nil
}

// IsZero reports whether the value is absent or null.
func (j JSON) IsZero() bool {
	t := bytes.TrimSpace(j)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// Decode unmarshals the value into v.
func (j JSON) Decode(v any) error {
	if j.IsZero() {
		return fmt.Errorf("no value")
	}
	return json.Unmarshal(j, v)
}

// String returns the value as text: a JSON string's contents, or the JSON
// encoding of any other value.
func (j JSON) String() string {
	if j.IsZero() {
		return ""
	}
	var s string
	if err := json.Unmarshal(j, &s); err == nil {
		return s
	}
	return string(bytes.TrimSpace(j))
}

// MustJSON encodes v; for building values in code and tests.
func MustJSON(v any) JSON {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Duration is a time.Duration written as a Go duration string ("10m", "90s").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"90s\" or \"10m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: use a number with a unit, such as \"90s\", \"10m\" or \"1h30m\"", s)
	}
	if v < 0 {
		return fmt.Errorf("bad duration %q: must not be negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the text as a string, messages as a list.
func (in Input) MarshalJSON() ([]byte, error) {
	if in.Messages != nil {
		return json.Marshal(in.Messages)
	}
	return json.Marshal(in.Text)
}

// UnmarshalJSON accepts a string or a list of {role, content} messages.
func (in *Input) UnmarshalJSON(b []byte) error {
	*in = Input{}
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in.Messages); err != nil {
			return fmt.Errorf("input messages: %w", err)
		}
		if in.Messages == nil {
			in.Messages = []InputMessage{}
		}
		return nil
	}
	if err := json.Unmarshal(b, &in.Text); err != nil {
		return fmt.Errorf("input must be a string or a list of {role, content} messages")
	}
	return nil
}

// Prompt returns the input as one instruction: the text, or the content of
// the last user message.
func (in Input) Prompt() string {
	if in.Messages == nil {
		return in.Text
	}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role == "user" {
			return in.Messages[i].Content
		}
	}
	return ""
}

// DeepCopy returns an independent copy of the spec. Every field is plain
// data, so a JSON round trip is exact.
func (s *Spec) DeepCopy() *Spec {
	if s == nil {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("spec: deep copy: %v", err))
	}
	out := new(Spec)
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("spec: deep copy: %v", err))
	}
	return out
}

// MarshalJSON writes a step without a user as its command string, so specs
// and snapshot identities from before users existed stay the same.
func (s SetupStep) MarshalJSON() ([]byte, error) {
	if s.User == "" {
		return json.Marshal(s.Run)
	}
	type plain SetupStep
	return json.Marshal(plain(s))
}

// UnmarshalJSON accepts a command string or {run, user}.
func (s *SetupStep) UnmarshalJSON(b []byte) error {
	*s = SetupStep{}
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		type plain SetupStep
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var p plain
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("setup step: %w", err)
		}
		*s = SetupStep(p)
		return nil
	}
	if err := json.Unmarshal(b, &s.Run); err != nil {
		return fmt.Errorf("a setup step must be a command string or {run, user}")
	}
	return nil
}

// Steps turns commands into setup steps run as root.
func Steps(cmds ...string) []SetupStep {
	out := make([]SetupStep, len(cmds))
	for i, c := range cmds {
		out[i] = SetupStep{Run: c}
	}
	return out
}
