package spec

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
)

// typesSource is this package's types.go: its doc comments become the
// schema's descriptions, so the two never drift apart.
//
//go:embed types.go
var typesSource string

// durationPattern matches what time.ParseDuration accepts without a sign
// (negative durations are rejected).
const durationPattern = `^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// parserPattern matches checker parser names (see ParserSyntaxOK).
const parserPattern = `^(exit-code|json|junit:.*\S.*|[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*)$`

// Schema returns the JSON Schema (draft 2020-12) of a run spec, with the
// doc comments of the Go types as descriptions and the enumerations that
// Validate checks. Combinations (exactly one dataset source, a judge for
// code-quality, ...) are left to Validate.
func Schema() ([]byte, error) {
	g := &schemaGen{defs: map[string]any{}}
	if err := g.loadDocs(); err != nil {
		return nil, err
	}
	root := g.object(reflect.TypeFor[Spec]())
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = "https://evals.si/schemas/run-spec.json"
	root["title"] = "Evals.si run spec"
	root["$defs"] = g.defs
	return json.MarshalIndent(root, "", "  ")
}

type schemaGen struct {
	defs map[string]any
	// docs maps "Type" and "Type.Field" (Go names) to doc comments.
	docs map[string]string
}

func (g *schemaGen) loadDocs() error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "types.go", typesSource, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("reading spec type docs: %w", err)
	}
	g.docs = map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, sp := range gd.Specs {
			ts := sp.(*ast.TypeSpec)
			doc := gd.Doc
			if ts.Doc != nil {
				doc = ts.Doc
			}
			g.docs[ts.Name.Name] = cleanDoc(doc.Text())
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, fl := range st.Fields.List {
				for _, n := range fl.Names {
					g.docs[ts.Name.Name+"."+n.Name] = cleanDoc(fl.Doc.Text())
				}
			}
		}
	}
	return nil
}

// cleanDoc joins a doc comment into one paragraph.
func cleanDoc(s string) string { return strings.Join(strings.Fields(s), " ") }

// enums are the enumerated fields, keyed by "GoType.json_name".
func schemaEnums() map[string][]string {
	return map[string][]string{
		"ModelRef.connector":          Connectors(),
		"SandboxPolicy.network":       NetworkModes(),
		"SandboxPolicy.min_isolation": IsolationLevels(),
		"SandboxPolicy.ladder":        Rungs(),
		"Environment.setup_network":   SetupNetworkModes(),
		"Checker.network":             NetworkModes(),
		"Recording.mode":              RecordingModes(),
		"Fault.kind":                  FaultKinds(),
		"Builtin.tool_call_mode":      ToolCallModes(),
		"Builtin.tool_call_format":    ToolCallFormats(),
		"Evaluator.name":              EvaluatorNames(),
		"Evaluator.mode":              TrajectoryMatchModes(),
	}
}

func (g *schemaGen) ref(t reflect.Type) map[string]any {
	name := t.Name()
	if _, ok := g.defs[name]; !ok {
		g.defs[name] = nil // placeholder: breaks cycles
		g.defs[name] = g.object(t)
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// object is the schema of a struct type, embedded structs flattened.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	enums := schemaEnums()
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			sf := t.Field(i)
			name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type)
				continue
			}
			if !sf.IsExported() || name == "-" {
				continue
			}
			p := g.typeSchema(sf.Type)
			key := t.Name() + "." + name
			if vals, ok := enums[key]; ok {
				if p["type"] == "array" {
					p["items"] = map[string]any{"type": "string", "enum": vals}
				} else {
					p = map[string]any{"type": "string", "enum": vals}
				}
			}
			switch {
			case t == reflect.TypeFor[Checker]() && name == "parser":
				p["pattern"] = parserPattern
			case t == reflect.TypeFor[Caps]():
				for _, c := range capFields() {
					if c.name == name {
						p["minimum"], p["maximum"] = 0, c.max
					}
				}
			case t == reflect.TypeFor[Spec]() && name == "evaluators":
				// Each item is a name (shorthand) or a name with options.
				p["items"] = map[string]any{"oneOf": []any{
					map[string]any{"type": "string", "enum": EvaluatorNames()},
					g.ref(reflect.TypeFor[Evaluator]()),
				}}
			}
			if d := g.docs[t.Name()+"."+sf.Name]; d != "" {
				p["description"] = d
			}
			props[name] = p
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
		}
	}
	walk(t)
	out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		out["required"] = required
	}
	if d := g.docs[t.Name()]; d != "" {
		out["description"] = d
	}
	return out
}

func (g *schemaGen) typeSchema(t reflect.Type) map[string]any {
	switch t {
	case jsonType:
		return map[string]any{}
	case durationType:
		return map[string]any{"type": "string", "pattern": durationPattern}
	case setupStepType:
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string"},
			g.ref(t),
		}}
	case inputType:
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string"},
			map[string]any{"type": "array", "items": g.ref(reflect.TypeFor[InputMessage]())},
		}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.typeSchema(t.Elem())
	case reflect.Struct:
		return g.ref(t)
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.typeSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.typeSchema(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	}
	return map[string]any{}
}
