package recording

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"evals.si/model"
	"evals.si/trajectory"
)

// FormatVersion is the version of the recording format this build writes
// and reads (docs/recording.md).
const FormatVersion = 1

// ManifestFile names the manifest in a recording's directory.
const ManifestFile = "manifest.json"

// OtherCallsFile holds the model calls made outside any trial (the native
// tool-call probe), replayed by matching the request.
const OtherCallsFile = "calls.jsonl"

// Manifest describes a recording.
type Manifest struct {
	Format  int       `json:"format"`
	Spec    string    `json:"spec,omitempty"`
	Created time.Time `json:"created"`
}

// Line types.
const (
	TypeModelCall = "model_call"
	TypeTool      = "tool"
)

// Line is one line of a trial file: a model call (Role, Request, Response)
// or a tool call with its result (Step, Call, Result). Index counts lines
// of its kind in the trial from 0: model calls per role, tools overall.
type Line struct {
	Type     string                 `json:"type"`
	Role     string                 `json:"role,omitempty"`
	Index    int                    `json:"index"`
	Step     int                    `json:"step,omitempty"`
	Request  *Request               `json:"request,omitempty"`
	Response *Response              `json:"response,omitempty"`
	Call     *trajectory.ToolCall   `json:"call,omitempty"`
	Result   *trajectory.ToolResult `json:"result,omitempty"`
}

// Request is a recorded model request: what the model was shown, never
// credentials or transport headers.
type Request struct {
	Model       string               `json:"model,omitempty"`
	System      string               `json:"system,omitempty"`
	Messages    []trajectory.Message `json:"messages"`
	Tools       []Tool               `json:"tools,omitempty"`
	MaxTokens   int                  `json:"max_tokens,omitempty"`
	Temperature *float64             `json:"temperature,omitempty"`
}

// Tool is a tool definition offered to the model.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Response is a recorded model response.
type Response struct {
	Message    trajectory.Message `json:"message"`
	Usage      trajectory.Usage   `json:"usage"`
	StopReason string             `json:"stop_reason,omitempty"`
	Model      string             `json:"model,omitempty"`
}

func fromRequest(r model.Request) *Request {
	out := &Request{Model: r.Model, System: r.System, Messages: r.Messages, MaxTokens: r.MaxTokens, Temperature: r.Temperature}
	if out.Messages == nil {
		out.Messages = []trajectory.Message{}
	}
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return out
}

func fromResponse(r model.Response) *Response {
	return &Response{Message: r.Message, Usage: r.Usage, StopReason: r.StopReason, Model: r.Model}
}

func (r *Response) toModel() model.Response {
	return model.Response{Message: r.Message, Usage: r.Usage, StopReason: r.StopReason, Model: r.Model}
}

// EscapeID turns a record id into a portable file name: letters, digits,
// '-', '_' and '.' stay (a leading '.' does not), every other byte becomes
// %XX, so ids with '/', ':' or spaces work on every file system.
func EscapeID(id string) string {
	if id == "" {
		return "%"
	}
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		keep := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0
		if keep {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// TrialPath is the file of one trial in a recording directory.
func TrialPath(dir, recordID string, trial int) string {
	return filepath.Join(dir, EscapeID(recordID), fmt.Sprintf("trial-%d.jsonl", trial))
}

// ReadLines reads a JSONL recording file.
func ReadLines(path string) ([]Line, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Line
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	for n := 1; sc.Scan(); n++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var l Line
		if err := json.Unmarshal(text, &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		switch {
		case l.Type == TypeModelCall && l.Response != nil:
		case l.Type == TypeTool && l.Result != nil:
		default:
			return nil, fmt.Errorf("%s:%d: a line must be a model_call with a response or a tool with a result (type %q)", path, n, l.Type)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// ReadManifest reads and checks a recording's manifest.
func ReadManifest(dir string) (Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(dir); derr != nil {
			return Manifest{}, fmt.Errorf("recording directory %s does not exist: record first with mode: record", dir)
		}
		return Manifest{}, fmt.Errorf("%s has no %s: it is not a recording (record first with mode: record)", dir, ManifestFile)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("reading the recording manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("decoding %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if m.Format != FormatVersion {
		return Manifest{}, fmt.Errorf("%s: recording format %d, this build reads format %d", filepath.Join(dir, ManifestFile), m.Format, FormatVersion)
	}
	return m, nil
}

// appendLine writes one line to f.
func appendLine(f *os.File, l Line) error {
	data, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encoding a recording line: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("writing the recording: %w", err)
	}
	return nil
}
