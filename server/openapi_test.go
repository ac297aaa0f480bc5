package server_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// openAPIDoc is the part of the served description these tests read.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Paths   map[string]map[string]struct {
		Security    *[]map[string][]string `json:"security"`
		Parameters  []struct{ Name, In string }
		RequestBody *struct {
			Content map[string]struct {
				Schema map[string]any `json:"schema"`
			} `json:"content"`
		} `json:"requestBody"`
		Responses map[string]struct {
			Content map[string]struct {
				Schema map[string]any `json:"schema"`
			} `json:"content"`
		} `json:"responses"`
	} `json:"paths"`
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

// TestOpenAPIMatchesRoutes proves the served description has exactly the
// server's routes — every mux route a path and method in the document and
// every documented operation a route — with their path parameters, a
// bearer security requirement on every /v1 route, and an api.Error schema
// for every error response.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f := newFixture(t, nil)
	r := f.do("GET", "/openapi.json", "", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var doc openAPIDoc
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decoding the description: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", doc.OpenAPI)
	}

	// The mux's {name...} is OpenAPI's {name}.
	wildcard := regexp.MustCompile(`\{([a-z_]+)(\.\.\.)?\}`)
	var fromMux []string
	for _, rt := range f.srv.Routes() {
		fromMux = append(fromMux, strings.ToLower(rt.Method)+" "+wildcard.ReplaceAllString(rt.Pattern, "{$1}"))
	}
	var fromDoc []string
	for p, ops := range doc.Paths {
		for m := range ops {
			fromDoc = append(fromDoc, m+" "+p)
		}
	}
	slices.Sort(fromMux)
	slices.Sort(fromDoc)
	for _, op := range fromMux {
		if !slices.Contains(fromDoc, op) {
			t.Errorf("the route %s is not in openapi.json", op)
		}
	}
	for _, op := range fromDoc {
		if !slices.Contains(fromMux, op) {
			t.Errorf("openapi.json describes %s, which the server does not serve", op)
		}
	}

	for p, ops := range doc.Paths {
		for m, op := range ops {
			name := m + " " + p
			var params []string
			for _, prm := range op.Parameters {
				if prm.In == "path" {
					params = append(params, prm.Name)
				}
			}
			var want []string
			for _, sub := range wildcard.FindAllStringSubmatch(p, -1) {
				want = append(want, sub[1])
			}
			if !slices.Equal(params, want) {
				t.Errorf("%s: path parameters %v, want %v", name, params, want)
			}
			secured := op.Security == nil || len(*op.Security) > 0 // nil: the document's bearer default
			if strings.HasPrefix(p, "/v1/") != secured {
				t.Errorf("%s: secured %v, want %v", name, secured, strings.HasPrefix(p, "/v1/"))
			}
			if strings.HasPrefix(p, "/v1/") {
				if _, ok := op.Responses["401"]; !ok {
					t.Errorf("%s: no 401 response", name)
				}
			}
			if op.RequestBody != nil {
				for _, code := range []string{"400", "413", "415"} {
					if _, ok := op.Responses[code]; !ok {
						t.Errorf("%s takes a body but documents no %s", name, code)
					}
				}
				sch := op.RequestBody.Content["application/json"].Schema
				ref, _ := sch["$ref"].(string)
				body := doc.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
				if body == nil || body["additionalProperties"] != false {
					t.Errorf("%s: the request body %v must be a schema refusing unknown fields, as the server does", name, sch)
				}
			}
			for code, resp := range op.Responses {
				if code[0] < '4' {
					continue
				}
				if got := resp.Content["application/json"].Schema["$ref"]; got != "#/components/schemas/Error" {
					t.Errorf("%s %s: error schema %v, want the Error schema", name, code, got)
				}
			}
		}
	}
}
