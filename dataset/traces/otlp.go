package traces

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The OTLP JSON encoding (opentelemetry-proto's protobuf JSON mapping, as
// the Collector's file exporter writes it and Jaeger's /api/v3 returns it):
// lowerCamelCase fields, trace and span ids as hex, 64-bit integers as
// strings, enums as numbers. Names for enums and base64 ids (what a generic
// protobuf JSON encoder writes) are accepted too.

type tracesData struct {
	ResourceSpans []resourceSpans `json:"resourceSpans"`
}

type resourceSpans struct {
	Resource struct {
		Attributes []keyValue `json:"attributes"`
	} `json:"resource"`
	ScopeSpans []struct {
		Spans []otlpSpan `json:"spans"`
	} `json:"scopeSpans"`
}

type otlpSpan struct {
	TraceID           string     `json:"traceId"`
	SpanID            string     `json:"spanId"`
	ParentSpanID      string     `json:"parentSpanId"`
	Name              string     `json:"name"`
	Kind              enum       `json:"kind"`
	StartTimeUnixNano flexInt    `json:"startTimeUnixNano"`
	EndTimeUnixNano   flexInt    `json:"endTimeUnixNano"`
	Attributes        []keyValue `json:"attributes"`
	Status            struct {
		Code enum `json:"code"`
	} `json:"status"`
}

type keyValue struct {
	Key   string   `json:"key"`
	Value anyValue `json:"value"`
}

type anyValue struct {
	StringValue *string  `json:"stringValue"`
	BoolValue   *bool    `json:"boolValue"`
	IntValue    *flexInt `json:"intValue"`
	DoubleValue *float   `json:"doubleValue"`
	BytesValue  *string  `json:"bytesValue"`
	ArrayValue  *struct {
		Values []anyValue `json:"values"`
	} `json:"arrayValue"`
	KvlistValue *struct {
		Values []keyValue `json:"values"`
	} `json:"kvlistValue"`
}

// flexInt is an int64 written as a JSON string (the mapping's rule for
// 64-bit integers) or a number.
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not an integer", b)
	}
	*n = flexInt(v)
	return nil
}

// float is a double, or one of the strings "NaN", "Infinity", "-Infinity".
type float float64

func (f *float) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	switch s {
	case "NaN":
		*f = float(math.NaN())
		return nil
	case "Infinity":
		*f = float(math.Inf(1))
		return nil
	case "-Infinity":
		*f = float(math.Inf(-1))
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", b)
	}
	*f = float(v)
	return nil
}

// enum is a protobuf enum as its number or its name (SPAN_KIND_SERVER,
// STATUS_CODE_ERROR).
type enum struct {
	num  int
	name string
}

func (e *enum) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &e.name)
	}
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &e.num)
}

// is reports whether e is the value with number num or a name ending in suffix.
func (e enum) is(num int, suffix string) bool {
	if e.name != "" {
		return strings.HasSuffix(strings.ToUpper(e.name), suffix)
	}
	return e.num == num
}

var spanKinds = []string{"unspecified", "internal", "server", "client", "producer", "consumer"}

func (e enum) kind() string {
	for i, k := range spanKinds {
		if e.is(i, "_"+strings.ToUpper(k)) {
			return k
		}
	}
	return "unspecified"
}

func (e enum) status() string {
	switch {
	case e.is(1, "_OK"):
		return StatusOK
	case e.is(2, "_ERROR"):
		return StatusError
	}
	return StatusUnset
}

// value converts an attribute value to what a CEL filter sees: string,
// bool, int64, float64, []byte, []any or map[string]any.
func (v anyValue) value() any {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.BoolValue != nil:
		return *v.BoolValue
	case v.IntValue != nil:
		return int64(*v.IntValue)
	case v.DoubleValue != nil:
		return float64(*v.DoubleValue)
	case v.BytesValue != nil:
		b, err := base64.StdEncoding.DecodeString(*v.BytesValue)
		if err != nil {
			return *v.BytesValue
		}
		return b
	case v.ArrayValue != nil:
		out := make([]any, 0, len(v.ArrayValue.Values))
		for _, e := range v.ArrayValue.Values {
			out = append(out, e.value())
		}
		return out
	case v.KvlistValue != nil:
		return attrMap(v.KvlistValue.Values)
	}
	// An empty value: present, but nothing in it.
	return ""
}

func attrMap(kvs []keyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.value()
	}
	return m
}

// normID returns an id as lowercase hex, from hex or base64; "" for an
// empty or all-zero id (OTLP's "no parent").
func normID(s string, size int) (string, error) {
	if s == "" {
		return "", nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != size {
		if b, err = base64.StdEncoding.DecodeString(s); err != nil || len(b) != size {
			return "", fmt.Errorf("id %q is neither %d hex digits nor base64 of %d bytes", s, 2*size, size)
		}
	}
	if bytes.Equal(b, make([]byte, size)) {
		return "", nil
	}
	return hex.EncodeToString(b), nil
}

// spans flattens one OTLP document into spans.
func (td *tracesData) spans() ([]*Span, error) {
	var out []*Span
	for _, rs := range td.ResourceSpans {
		res := attrMap(rs.Resource.Attributes)
		service, _ := res["service.name"].(string)
		for _, ss := range rs.ScopeSpans {
			for i := range ss.Spans {
				s, err := newSpan(&ss.Spans[i], res, service)
				if err != nil {
					return nil, err
				}
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func newSpan(o *otlpSpan, res map[string]any, service string) (*Span, error) {
	tid, err := normID(o.TraceID, 16)
	if err == nil && tid == "" {
		err = fmt.Errorf("no trace id")
	}
	if err != nil {
		return nil, fmt.Errorf("span %q: trace id: %w", o.Name, err)
	}
	sid, err := normID(o.SpanID, 8)
	if err != nil {
		return nil, fmt.Errorf("span %q: span id: %w", o.Name, err)
	}
	pid, err := normID(o.ParentSpanID, 8)
	if err != nil {
		return nil, fmt.Errorf("span %q: parent span id: %w", o.Name, err)
	}
	start := time.Unix(0, int64(o.StartTimeUnixNano)).UTC()
	var dur float64
	if o.EndTimeUnixNano > o.StartTimeUnixNano {
		dur = float64(o.EndTimeUnixNano-o.StartTimeUnixNano) / 1e6
	}
	return &Span{
		Name:         o.Name,
		Attributes:   attrMap(o.Attributes),
		Status:       o.Status.Code.status(),
		DurationMS:   dur,
		TraceID:      tid,
		SpanID:       sid,
		ParentSpanID: pid,
		Kind:         o.Kind.kind(),
		Start:        start,
		Resource:     res,
		service:      service,
	}, nil
}
