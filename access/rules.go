package access

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
)

// rule is one compiled authorization rule.
type rule struct {
	text string
	prg  cel.Program
}

// The CEL object types of the three variables: the Go structs themselves,
// their fields named by their JSON tags, so a rule naming a field that
// does not exist fails at start-up rather than denying at run time.
var (
	celPrincipal = "access.Principal"
	celResource  = "access.Resource"
	celRequest   = "access.Request"
)

// ruleEnv is the CEL environment rules compile in.
func ruleEnv() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(ext.ParseStructTag("json"),
			reflect.TypeFor[Principal](), reflect.TypeFor[Resource](),
			reflect.TypeFor[AgentInfo](), reflect.TypeFor[Request]()),
		cel.Variable("principal", cel.ObjectType(celPrincipal)),
		cel.Variable("resource", cel.ObjectType(celResource)),
		cel.Variable("request", cel.ObjectType(celRequest)),
	)
}

// compileRules type-checks every rule: each must compile and return bool.
func compileRules(cfg Authorization) ([]rule, error) {
	if len(cfg.Rules) == 0 {
		return nil, nil
	}
	limit := cfg.CostLimit
	if limit == 0 {
		limit = DefaultCostLimit
	}
	env, err := ruleEnv()
	if err != nil {
		return nil, fmt.Errorf("authorization: building the CEL environment: %w", err)
	}
	var rules []rule
	var errs []error
	for i, text := range cfg.Rules {
		f := fmt.Sprintf("authorization.rules[%d]", i)
		ast, iss := env.Compile(text)
		if iss.Err() != nil {
			errs = append(errs, fmt.Errorf("%s: %w (variables: principal, resource, request)", f, iss.Err()))
			continue
		}
		if !ast.OutputType().IsExactType(cel.BoolType) {
			errs = append(errs, fmt.Errorf("%s: %q returns %s, not bool", f, text, ast.OutputType()))
			continue
		}
		// The interrupt check makes a long comprehension notice a
		// cancelled request, not only the cost limit.
		prg, err := env.Program(ast, cel.CostLimit(limit), cel.InterruptCheckFrequency(100))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		rules = append(rules, rule{text: text, prg: prg})
	}
	return rules, errors.Join(errs...)
}

// evalRules evaluates every rule in order; the first that is not true
// denies, and so does one that fails to evaluate.
func (a *Access) evalRules(ctx context.Context, p Principal, r Resource, q Request) error {
	if len(a.rules) == 0 {
		return nil
	}
	vars := map[string]any{"principal": p, "resource": r, "request": q}
	for i, rl := range a.rules {
		out, _, err := rl.prg.ContextEval(ctx, vars)
		if err == nil && out.Type() != types.BoolType {
			err = fmt.Errorf("the rule returned %s, not bool", out.Type().TypeName())
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("evaluating authorization.rules[%d]: %w", i, ctx.Err())
			}
			return &DeniedError{Principal: describe(p), Action: q.Action, Rule: i, RuleText: rl.text, Err: err}
		}
		if out != types.True {
			return &DeniedError{Principal: describe(p), Action: q.Action, Rule: i, RuleText: rl.text}
		}
	}
	return nil
}
