package traces

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
)

// filter is a compiled traces.filter.
type filter struct {
	prg cel.Program
}

// compileFilter compiles expr once, over the typed variable span (a Span):
// a misspelt field or a non-bool result is an error here, not per trace.
// An empty expression is no filter.
func compileFilter(expr string, costLimit uint64) (*filter, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	env, err := cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[Span](), ext.ParseStructTags(true)),
		cel.Variable("span", cel.ObjectType("traces.Span")),
		ext.Strings(),
	)
	if err != nil {
		return nil, fmt.Errorf("traces filter: building the CEL environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("traces filter %q does not compile (fields of span: name, attributes, status, duration_ms, trace_id, span_id, parent_span_id, kind, start, resource): %w", expr, iss.Err())
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("traces filter %q gives %s, not bool", expr, ast.OutputType())
	}
	// The cost limit bounds one evaluation, so a filter over a huge
	// attribute cannot stall the read; the interrupt check lets a
	// cancelled context stop a long comprehension.
	prg, err := env.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("traces filter %q: %w", expr, err)
	}
	return &filter{prg: prg}, nil
}

// match evaluates the filter on s. An error (a missing attribute, a type
// mismatch, the cost limit) is for the caller to count and skip.
func (f *filter) match(ctx context.Context, s *Span) (bool, error) {
	out, _, err := f.prg.ContextEval(ctx, map[string]any{"span": s})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("filter gave %v, not a bool", out.Value())
	}
	return b, nil
}
