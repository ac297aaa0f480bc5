package regress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/types"
)

// Bounds on a --when condition. The expression comes from whoever may write
// datasets, and on a server it runs inside the server process: its size,
// nesting and work are capped so that none can stall or exhaust it.
const (
	maxConditionChars = 4096
	maxConditionDepth = 32
	// conditionCostLimit is in CEL cost units (about one per value visited);
	// a condition over one trial needs a few hundred.
	conditionCostLimit = 1_000_000
	// runCostLimit bounds the condition's work over all trials of a run,
	// so that a costly condition times many trials cannot stall a server.
	runCostLimit = 200_000_000
)

// condition is a compiled --when expression over one trial:
//
//	scores   map(string, double)  the trial's scores by name
//	errored  bool                 the trial errored (then scores is empty)
//	trial    int                  the trial index, from 0
//	record   map(string, dyn)     id, input (a string or a list of
//	                              {role, content}), expected, metadata
type condition struct {
	prg cel.Program
}

// compileCondition type-checks expr once. Errors are *InvalidOptionError
// for "when", with the line and column in the expression.
func compileCondition(expr string) (*condition, error) {
	if expr == "" {
		return nil, &InvalidOptionError{Option: "when", Err: fmt.Errorf("a condition is required, e.g. 'scores[\"task-success\"] < 1'")}
	}
	if len(expr) > maxConditionChars {
		return nil, &InvalidOptionError{Option: "when", Err: fmt.Errorf("the condition is %d bytes; at most %d", len(expr), maxConditionChars)}
	}
	env, err := cel.NewEnv(
		cel.Variable("scores", cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable("errored", cel.BoolType),
		cel.Variable("trial", cel.IntType),
		cel.Variable("record", cel.MapType(cel.StringType, cel.DynType)),
		// Scores are doubles; let `scores["x"] < 1` mean what it says.
		cel.CrossTypeNumericComparisons(true),
		cel.ParserRecursionLimit(maxConditionDepth),
		cel.ParserExpressionSizeLimit(maxConditionChars),
	)
	if err != nil {
		return nil, fmt.Errorf("building the condition environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, &InvalidOptionError{Option: "when", Err: compileError(expr, iss.Errors())}
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, &InvalidOptionError{Option: "when", Err: fmt.Errorf("the condition gives a %s; it must give a bool", t)}
	}
	prg, err := env.Program(ast, cel.CostLimit(conditionCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, &InvalidOptionError{Option: "when", Err: err}
	}
	return &condition{prg: prg}, nil
}

// compileError says where in the expression each problem is, as line:column
// (from 1) with the line and a caret under the place.
func compileError(expr string, errs []*common.Error) error {
	lines := strings.Split(expr, "\n")
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString("\n")
		}
		line, col := e.Location.Line(), e.Location.Column()
		fmt.Fprintf(&b, "at %d:%d: %s", line, col+1, e.Message)
		if strings.Contains(e.Message, "(double, int)") || strings.Contains(e.Message, "(int, double)") {
			b.WriteString(" (scores are doubles: write 1.0, not 1)")
		}
		if line >= 1 && line <= len(lines) && col >= 0 {
			fmt.Fprintf(&b, "\n  | %s\n  | %s^", lines[line-1], strings.Repeat(".", min(col, utf8.RuneCountInString(lines[line-1]))))
		}
	}
	return errors.New(b.String())
}

// trialVars are the condition's inputs for one trial.
type trialVars struct {
	scores  map[string]float64
	errored bool
	trial   int
	// record is the stored record JSON.
	record json.RawMessage
}

// holds evaluates the condition on one trial and returns its cost.
func (c *condition) holds(ctx context.Context, v trialVars) (bool, uint64, error) {
	var rec map[string]any
	if err := json.Unmarshal(v.record, &rec); err != nil {
		return false, 0, fmt.Errorf("decoding the record: %w", err)
	}
	// Absent fields are there, as null or empty, so that `record.expected
	// == null` works and a missing key is never a surprise.
	for _, k := range []string{"id", "input", "expected"} {
		if _, ok := rec[k]; !ok {
			rec[k] = nil
		}
	}
	if _, ok := rec["metadata"].(map[string]any); !ok {
		rec["metadata"] = map[string]any{}
	}
	out, det, err := c.prg.ContextEval(ctx, map[string]any{
		"scores": v.scores, "errored": v.errored, "trial": int64(v.trial), "record": rec,
	})
	if err != nil {
		return false, 0, err
	}
	var cost uint64
	if det != nil && det.ActualCost() != nil {
		cost = *det.ActualCost()
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, cost, fmt.Errorf("the condition gave %v (%s), not a bool", out, out.Type())
	}
	return bool(b), cost, nil
}
