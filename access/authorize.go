package access

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

var (
	// ErrUnauthenticated: no token, or one no config entry has (HTTP 401).
	ErrUnauthenticated = errors.New("unauthenticated: missing or unknown API token")
	// ErrDenied: authenticated, but not allowed (HTTP 403). Every denial
	// of this package wraps it, including untrusted programs and
	// ungranted secrets.
	ErrDenied = errors.New("access denied")
)

// Principal is who makes a request. The JSON names are also the CEL
// field names (principal.id, principal.kind, ...).
type Principal struct {
	// ID is the user's name for a user token, else the token's name.
	ID string `json:"id"`
	// Kind is user, token (a project token) or worker.
	Kind string `json:"kind"`
	// Project is the one project a user or project token belongs to;
	// empty for a worker.
	Project string `json:"project"`
	// Role is viewer, editor or admin (worker for a service token).
	Role string `json:"role"`
	// Projects confine a worker to these projects; empty: every project.
	Projects []string `json:"projects"`
	// Token is the name of the token used, for logs.
	Token string `json:"token"`
}

// Resource is what a request acts on.
type Resource struct {
	// Kind is run, trial, dataset or project.
	Kind string `json:"kind"`
	// Project owns the resource (for a project, its own name). A resource
	// with no project is denied to every project-scoped principal.
	Project string `json:"project"`
	// Name is the run's, dataset's or project's name or id.
	Name string `json:"name"`
	// Agent describes an agent run; it is set exactly when RunsCode is.
	Agent *AgentInfo `json:"agent"`
	// RunsCode is true for a run that runs commands in a sandbox (agent
	// runs).
	RunsCode bool `json:"runs_code"`
	// Endpoints are the URLs and addresses a run's worker itself connects
	// to (model base_url, remote agents, MCP servers, a harness address,
	// a trace backend), sorted; Paths the worker's own files it reads or
	// writes (dataset path or URI, script_file, recording dir, traces
	// file). Rules can confine both, e.g.
	// resource.endpoints.all(u, u.startsWith("https://")).
	Endpoints []string `json:"endpoints"`
	Paths     []string `json:"paths"`
}

// AgentInfo is resource.agent: what an agent run runs, and where.
type AgentInfo struct {
	// Kind is builtin (the built-in agent on a model), a2a, mcp,
	// responses, http, cli, oracle (target.agent), or external
	// (harness.external).
	Kind string `json:"kind"`
	// Harness is builtin, or for harness.external "command:<argv joined
	// by spaces>", "python:<module:Class>" or "address:<target>".
	Harness string `json:"harness"`
	// Image is environment.image (empty: the host's system directories).
	Image string `json:"image"`
	// Images are every image the run's tasks use: Image and those records
	// set in metadata.environment (see WithRecords).
	Images []string `json:"images"`
	// Network is the widest network any sandboxed command of the run gets
	// (the agent, setup, the checker), widest first allow > allowlist >
	// deny: a rule on it cannot be sidestepped through setup_network or
	// checker.network.
	Network string `json:"network"`
	// AllowHosts are every host an allowlist lets the run reach (the
	// sandbox's, a CLI agent's and the checker's).
	AllowHosts []string `json:"allow_hosts"`
	// MinIsolation is the weakest isolation the run can get: the stronger
	// of sandbox.min_isolation and the weakest rung of the ladder (none,
	// process, namespaced, container, vm).
	MinIsolation string `json:"min_isolation"`
}

// Request is the request itself.
type Request struct {
	// Action is the permission the request needs (PermRunsCreate, ...).
	Action string `json:"action"`
	// Time is when it was made (zero: now).
	Time time.Time `json:"time"`
}

// DeniedError says why a request was denied. It wraps ErrDenied.
type DeniedError struct {
	Principal string
	Action    string
	// Reason is the missing permission or the scope that failed, when no
	// rule was reached.
	Reason string
	// Rule is the index of the rule that denied (-1: none), RuleText its
	// text, Err the evaluation error when the rule did not evaluate.
	Rule     int
	RuleText string
	Err      error
}

func (e *DeniedError) Error() string {
	switch {
	case e.Rule >= 0 && e.Err != nil:
		return fmt.Sprintf("%s %s: denied: authorization.rules[%d] (%s) could not be evaluated, which denies: %v", e.Principal, e.Action, e.Rule, e.RuleText, e.Err)
	case e.Rule >= 0:
		return fmt.Sprintf("%s %s: denied by authorization.rules[%d]: %s", e.Principal, e.Action, e.Rule, e.RuleText)
	}
	return fmt.Sprintf("%s %s: denied: %s", e.Principal, e.Action, e.Reason)
}

func (e *DeniedError) Unwrap() error { return ErrDenied }

// Authenticate returns the principal a bearer token (the token itself,
// without "Bearer ") stands for. Tokens are compared by their SHA-256
// digests in constant time, all of them every time, so neither timing nor
// the error tells which part of a wrong token was wrong.
func (a *Access) Authenticate(bearer string) (Principal, error) {
	if bearer == "" {
		return Principal{}, ErrUnauthenticated
	}
	d := sha256.Sum256([]byte(bearer))
	match := -1
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], a.tokens[i].digest[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Principal{}, ErrUnauthenticated
	}
	p := a.tokens[match].principal
	p.Projects = slices.Clone(p.Projects)
	return p, nil
}

// Authorize allows or denies request q by p on r: p's role must hold
// q.Action, p must belong to r's project (a worker: be confined to none, or
// to r's), and every authorization rule must evaluate to true. A zero
// principal is ErrUnauthenticated; a denial is a *DeniedError.
func (a *Access) Authorize(ctx context.Context, p Principal, r Resource, q Request) error {
	if p.Kind == "" || p.ID == "" {
		return ErrUnauthenticated
	}
	// A cancelled request is never authorized, whatever the rules.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("authorizing %s: %w", q.Action, err)
	}
	deny := func(format string, args ...any) error {
		return &DeniedError{Principal: describe(p), Action: q.Action, Rule: -1, Reason: fmt.Sprintf(format, args...)}
	}
	if !slices.Contains(Permissions(), q.Action) {
		return deny("unknown action %q (want one of %s)", q.Action, strings.Join(Permissions(), ", "))
	}
	// The role must fit the kind, so a principal assembled by hand cannot
	// give a worker a member's role or a user the worker's.
	if (p.Kind == KindWorker) != (p.Role == roleWorker) || p.Kind != KindWorker && roleRank[p.Role] == 0 {
		return deny("role %q does not belong to a %s", p.Role, p.Kind)
	}
	if !slices.Contains(rolePerms[p.Role], q.Action) {
		return deny("role %s lacks the permission %s", p.Role, q.Action)
	}
	switch {
	case p.Kind == KindWorker:
		if len(p.Projects) > 0 && !slices.Contains(p.Projects, r.Project) {
			return deny("the worker may serve projects %s only, not %q", strings.Join(p.Projects, ", "), r.Project)
		}
	case p.Project == "" || r.Project != p.Project:
		return deny("the %s %q belongs to another project than %q", r.Kind, r.Name, p.Project)
	}
	if q.Time.IsZero() {
		q.Time = a.now()
	}
	return a.evalRules(ctx, p, r, q)
}

// describe names a principal in errors and logs.
func describe(p Principal) string {
	switch p.Kind {
	case KindUser:
		return fmt.Sprintf("user %s (token %s, project %s)", p.ID, p.Token, p.Project)
	case KindToken:
		return fmt.Sprintf("token %s (project %s)", p.ID, p.Project)
	}
	return fmt.Sprintf("%s %s", p.Kind, p.ID)
}
