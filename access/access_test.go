package access

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"evals.si/spec"
)

const (
	anaToken    = "ana-secret-token-0123456789"
	boToken     = "bo-secret-token-0123456789"
	ciToken     = "ci-secret-token-0123456789"
	betaToken   = "beta-secret-token-0123456789"
	workerToken = "worker-secret-token-0123456789"
	scopedToken = "scoped-worker-token-0123456789"
)

func digest(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// testConfig is the brief's example config, with a second project.
func testConfig() Config {
	return Config{
		Projects: []Project{
			{Name: "alpha", Members: []Member{{User: "ana", Role: RoleEditor}, {User: "bo", Role: RoleViewer}}},
			{Name: "beta", Members: []Member{{User: "cy", Role: RoleAdmin}}},
		},
		Tokens: []Token{
			{Name: "ana-cli", User: "ana", Project: "alpha", SHA256: digest(anaToken)},
			{Name: "bo-cli", User: "bo", Project: "alpha", SHA256: strings.ToUpper(digest(boToken))},
			{Name: "ci", Project: "alpha", Role: RoleEditor, TokenEnv: "ALPHA_CI_TOKEN"},
			{Name: "cy-cli", User: "cy", Project: "beta", SHA256: digest(betaToken)},
			{Name: "worker-1", Service: "worker", TokenEnv: "EVALSI_WORKER_TOKEN"},
			{Name: "worker-beta", Service: "worker", Projects: []string{"beta"}, SHA256: digest(scopedToken)},
		},
		Authorization: Authorization{Rules: []string{`!(resource.runs_code && resource.agent.network == "allow")`}},
		Credentials:   Credentials{Grants: map[string][]string{"alpha": {"ANTHROPIC_API_KEY", "GH_TOKEN"}}},
		Agents: Agents{
			TrustedCommands: [][]string{{"npx", "-y", "@modelcontextprotocol/server-filesystem"}},
			TrustedPython:   []string{"my_company.harness:Harness"},
		},
	}
}

func testEnv(k string) string {
	return map[string]string{"ALPHA_CI_TOKEN": ciToken, "EVALSI_WORKER_TOKEN": workerToken, "SHORT": "abc"}[k]
}

func newAccess(t *testing.T, cfg Config) *Access {
	t.Helper()
	a, err := New(cfg, testEnv)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

// TestNewRejects proves that each kind of bad config is refused by New with
// an error naming the field (and never echoing a secret).
func TestNewRejects(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"unknown member role", func(c *Config) { c.Projects[0].Members[0].Role = "owner" }, `projects[0].members[0].role: unknown role "owner"`},
		{"duplicate project", func(c *Config) { c.Projects[1].Name = "alpha" }, `projects[1].name: project "alpha" is listed twice`},
		{"project name with a slash", func(c *Config) { c.Projects[1].Name = "../x" }, `projects[1].name`},
		{"duplicate member", func(c *Config) { c.Projects[0].Members[1].User = "ana" }, `projects[0].members[1].user: user "ana" is listed twice`},
		{"duplicate token name", func(c *Config) { c.Tokens[1].Name = "ana-cli" }, `tokens[1].name: token "ana-cli" is listed twice`},
		{"token without a secret", func(c *Config) { c.Tokens[0].SHA256 = "" }, `tokens[0] (token "ana-cli"): a token needs its secret`},
		{"token with both secrets", func(c *Config) { c.Tokens[0].TokenEnv = "X" }, `set one of sha256 and token_env`},
		{"token_env unset", func(c *Config) { c.Tokens[2].TokenEnv = "UNSET" }, `tokens[2] (token "ci"): token_env: the variable UNSET is not set`},
		{"token_env too short", func(c *Config) { c.Tokens[2].TokenEnv = "SHORT" }, `shorter than 16`},
		{"bad sha256", func(c *Config) { c.Tokens[0].SHA256 = "abc" }, `sha256: want the 64 hex digits`},
		{"sha256 of the empty token", func(c *Config) { c.Tokens[0].SHA256 = emptySHA256 }, `digest of an empty token`},
		{"two tokens, one secret", func(c *Config) { c.Tokens[1].SHA256 = digest(anaToken) }, `tokens[1]: token "bo-cli" has the same secret as token "ana-cli"`},
		{"token of a non-member", func(c *Config) { c.Tokens[0].User = "zed" }, `user: "zed" is not a member of project "alpha"`},
		{"token of an unknown project", func(c *Config) { c.Tokens[0].Project = "gamma" }, `project: no project "gamma"`},
		{"token wider than its user", func(c *Config) { c.Tokens[1].Role = RoleAdmin }, `role: "admin" exceeds the user's role "viewer"`},
		{"project token without role", func(c *Config) { c.Tokens[2].Role = "" }, `needs a role`},
		{"project token with unknown role", func(c *Config) { c.Tokens[2].Role = "worker" }, `role: unknown role "worker"`},
		{"unknown service", func(c *Config) { c.Tokens[4].Service = "admin" }, `service "admin"`},
		{"service token with a role", func(c *Config) { c.Tokens[4].Role = RoleAdmin }, `a service token has no user, project or role`},
		{"worker confined to an unknown project", func(c *Config) { c.Tokens[5].Projects = []string{"gamma"} }, `projects: no project "gamma"`},
		{"rule that does not compile", func(c *Config) { c.Authorization.Rules = append(c.Authorization.Rules, `resource.name ==`) }, `authorization.rules[1]`},
		{"rule naming no field", func(c *Config) { c.Authorization.Rules = []string{`resource.agent.netwrk == "allow"`} }, `authorization.rules[0]: ERROR: <input>:1:15: undefined field 'netwrk'`},
		{"rule not returning bool", func(c *Config) { c.Authorization.Rules = []string{`resource.name`} }, `authorization.rules[0]: "resource.name" returns string, not bool`},
		{"rule returning dyn", func(c *Config) { c.Authorization.Rules = []string{`dyn(resource.name)`} }, `not bool`},
		{"grant to an unknown project", func(c *Config) { c.Credentials.Grants["gamma"] = []string{"X"} }, `credentials.grants.gamma: no project "gamma"`},
		{"grant of a non-name", func(c *Config) { c.Credentials.Grants["alpha"] = []string{"A B"} }, `credentials.grants.alpha[0]`},
		{"empty trusted command", func(c *Config) { c.Agents.TrustedCommands = append(c.Agents.TrustedCommands, []string{}) }, `agents.trusted_commands[1]`},
		{"... not last", func(c *Config) { c.Agents.TrustedCommands = [][]string{{"npx", "...", "x"}} }, `agents.trusted_commands[0]: "..." may only be the last element`},
		{"bad python ref", func(c *Config) { c.Agents.TrustedPython = []string{"no class"} }, `agents.trusted_python[0]`},
		{"bad env name", func(c *Config) { c.Agents.TrustedEnv = []string{"A=B"} }, `agents.trusted_env[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.change(&cfg)
			_, err := New(cfg, testEnv)
			if err == nil {
				t.Fatalf("New accepted the config; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			for _, secret := range []string{anaToken, boToken, ciToken, workerToken, "abc"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows a token", err)
				}
			}
		})
	}
	if _, err := New(testConfig(), testEnv); err != nil {
		t.Fatalf("the valid config: %v", err)
	}
}

// TestAuthenticate proves each kind of token authenticates as its principal
// and anything else, including near misses, is ErrUnauthenticated.
func TestAuthenticate(t *testing.T) {
	a := newAccess(t, testConfig())
	tests := []struct {
		bearer string
		want   Principal
	}{
		{anaToken, Principal{ID: "ana", Kind: KindUser, Project: "alpha", Role: RoleEditor, Token: "ana-cli"}},
		{boToken, Principal{ID: "bo", Kind: KindUser, Project: "alpha", Role: RoleViewer, Token: "bo-cli"}},
		{ciToken, Principal{ID: "ci", Kind: KindToken, Project: "alpha", Role: RoleEditor, Token: "ci"}},
		{workerToken, Principal{ID: "worker-1", Kind: KindWorker, Role: "worker", Token: "worker-1"}},
		{scopedToken, Principal{ID: "worker-beta", Kind: KindWorker, Role: "worker", Projects: []string{"beta"}, Token: "worker-beta"}},
	}
	for _, tt := range tests {
		p, err := a.Authenticate(tt.bearer)
		if err != nil {
			t.Errorf("Authenticate(%s...): %v", tt.bearer[:6], err)
			continue
		}
		if p.ID != tt.want.ID || p.Kind != tt.want.Kind || p.Project != tt.want.Project || p.Role != tt.want.Role ||
			p.Token != tt.want.Token || strings.Join(p.Projects, ",") != strings.Join(tt.want.Projects, ",") {
			t.Errorf("Authenticate(%s...) = %+v, want %+v", tt.bearer[:6], p, tt.want)
		}
	}
	for _, bad := range []string{"", anaToken + "x", anaToken[:len(anaToken)-1], "Bearer " + anaToken, digest(anaToken), strings.ToUpper(anaToken)} {
		_, err := a.Authenticate(bad)
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(%q) = %v, want ErrUnauthenticated", bad, err)
		}
		if err != nil && bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error %q echoes the token", err)
		}
	}
	// A returned principal is a copy: changing it changes no later answer.
	p, _ := a.Authenticate(scopedToken)
	p.Projects[0] = "alpha"
	if q, _ := a.Authenticate(scopedToken); q.Projects[0] != "beta" {
		t.Errorf("changing a principal changed the configured one: %v", q.Projects)
	}
}

func mustAuth(t *testing.T, a *Access, bearer string) Principal {
	t.Helper()
	p, err := a.Authenticate(bearer)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func parseSpec(t *testing.T, yaml string) *spec.Spec {
	t.Helper()
	f, err := spec.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("parsing the spec: %v", err)
	}
	return f.Spec
}

const modelRun = `
dataset: {records: [{id: r1, input: hi}]}
target: {connector: anthropic, model: claude}
`

const allowAgentRun = `
dataset: {records: [{id: r1, input: fix it}]}
target: {connector: anthropic, model: claude}
harness: {builtin: {}}
environment: {image: docker.io/library/python:3.13-slim, sandbox: {network: allow}}
`

const denyAgentRun = `
dataset: {records: [{id: r1, input: fix it}]}
target: {connector: anthropic, model: claude}
harness: {builtin: {}}
environment: {image: docker.io/library/python:3.13-slim}
`

// TestAuthorize proves the role, project-scope and rule checks, each denial
// wrapping ErrDenied and naming what denied.
func TestAuthorize(t *testing.T) {
	a := newAccess(t, testConfig())
	ana, bo, ci, cy := mustAuth(t, a, anaToken), mustAuth(t, a, boToken), mustAuth(t, a, ciToken), mustAuth(t, a, betaToken)
	worker, scoped := mustAuth(t, a, workerToken), mustAuth(t, a, scopedToken)
	alphaRun := Resource{Kind: ResourceRun, Project: "alpha", Name: "r1"}
	betaRun := Resource{Kind: ResourceRun, Project: "beta", Name: "r2"}
	tests := []struct {
		name   string
		p      Principal
		r      Resource
		action string
		want   string // "" allowed, else a substring of the denial
	}{
		{"editor creates a run", ana, alphaRun, PermRunsCreate, ""},
		{"editor writes a dataset", ana, Resource{Kind: ResourceDataset, Project: "alpha", Name: "d"}, PermDatasetsWrite, ""},
		{"viewer reads a run", bo, alphaRun, PermRunsRead, ""},
		{"viewer denied runs.create", bo, alphaRun, PermRunsCreate, "role viewer lacks the permission runs.create"},
		{"viewer denied datasets.write", bo, alphaRun, PermDatasetsWrite, "lacks the permission datasets.write"},
		{"editor denied projects.admin", ana, Resource{Kind: ResourceProject, Project: "alpha", Name: "alpha"}, PermProjectsAdmin, "lacks the permission projects.admin"},
		{"admin administers its project", cy, Resource{Kind: ResourceProject, Project: "beta", Name: "beta"}, PermProjectsAdmin, ""},
		{"token of alpha denied a run of beta", ci, betaRun, PermRunsRead, `the run "r2" belongs to another project than "alpha"`},
		{"user of alpha denied a run of beta", ana, betaRun, PermRunsRead, "another project"},
		{"admin of beta denied a run of alpha", cy, alphaRun, PermRunsRead, "another project"},
		{"resource with no project", ana, Resource{Kind: ResourceRun, Name: "x"}, PermRunsRead, "another project"},
		{"editor cannot lease", ana, alphaRun, PermWorkerLease, "lacks the permission worker.lease"},
		{"worker leases", worker, Resource{Kind: ResourceTrial}, PermWorkerLease, ""},
		{"worker leases any project's trial", worker, Resource{Kind: ResourceTrial, Project: "alpha"}, PermWorkerLease, ""},
		{"worker cannot read runs", worker, alphaRun, PermRunsRead, "role worker lacks the permission runs.read"},
		{"worker cannot create runs", worker, alphaRun, PermRunsCreate, "lacks the permission"},
		{"confined worker leases its project", scoped, Resource{Kind: ResourceTrial, Project: "beta"}, PermWorkerLease, ""},
		{"confined worker denied another project", scoped, Resource{Kind: ResourceTrial, Project: "alpha"}, PermWorkerLease, "projects beta only"},
		{"unknown action", ana, alphaRun, "runs.delete", `unknown action "runs.delete"`},
		{"a user given the worker's role", Principal{ID: "ana", Kind: KindUser, Project: "alpha", Role: "worker"}, alphaRun, PermWorkerLease, "does not belong to a user"},
		{"a worker given a member's role", Principal{ID: "w", Kind: KindWorker, Role: RoleAdmin}, alphaRun, PermRunsRead, "does not belong to a worker"},
		{"an unknown role", Principal{ID: "x", Kind: KindToken, Project: "alpha", Role: "root"}, alphaRun, PermRunsRead, "does not belong"},
		{"rule denies a network: allow agent run", ana, RunResource("alpha", parseSpec(t, allowAgentRun)), PermRunsCreate, `denied by authorization.rules[0]: !(resource.runs_code && resource.agent.network == "allow")`},
		{"rule allows a network: deny agent run", ana, RunResource("alpha", parseSpec(t, denyAgentRun)), PermRunsCreate, ""},
		{"rule allows a plain model run", ana, RunResource("alpha", parseSpec(t, modelRun)), PermRunsCreate, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := a.Authorize(context.Background(), tt.p, tt.r, Request{Action: tt.action})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("denied: %v", err)
			case tt.want == "":
				return
			case err == nil:
				t.Fatalf("allowed; want a denial containing %q", tt.want)
			case !errors.Is(err, ErrDenied):
				t.Errorf("%v does not wrap ErrDenied", err)
			}
			var de *DeniedError
			if !errors.As(err, &de) {
				t.Errorf("%T is not a *DeniedError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("denial %q does not contain %q", err, tt.want)
			}
		})
	}
	if err := a.Authorize(context.Background(), Principal{}, alphaRun, Request{Action: PermRunsRead}); !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrDenied) {
		t.Errorf("a zero principal: %v, want ErrUnauthenticated (not ErrDenied)", err)
	}
}

// TestRules proves the CEL rules see typed principal, resource and request,
// that every rule must hold, and that an evaluation error, a cost overrun or
// a cancelled context never allows.
func TestRules(t *testing.T) {
	ctx := context.Background()
	agentRun := RunResource("alpha", parseSpec(t, denyAgentRun))
	model := RunResource("alpha", parseSpec(t, modelRun))
	nineAM := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		rules []string
		cost  uint64
		r     Resource
		when  time.Time
		want  string // "" allowed
	}{
		{"principal fields", []string{`principal.kind == "user" && principal.id == "ana" && principal.role == "editor" && principal.project == resource.project`}, 0, model, nineAM, ""},
		{"request fields", []string{`request.action == "runs.create" && request.time.getHours() < 18`}, 0, model, nineAM, ""},
		{"request time denies", []string{`request.time.getHours() < 8`}, 0, model, nineAM, "denied by authorization.rules[0]: request.time.getHours() < 8"},
		{"agent fields", []string{`resource.runs_code && has(resource.agent) && resource.agent.kind == "builtin" && resource.agent.image.startsWith("docker.io/library/") && resource.agent.min_isolation == "process"`}, 0, agentRun, nineAM, ""},
		{"images list", []string{`resource.agent.images.all(i, i.startsWith("docker.io/"))`}, 0, agentRun, nineAM, ""},
		{"no agent on a model run", []string{`!has(resource.agent) && !resource.runs_code`}, 0, model, nineAM, ""},
		{"all rules must hold: the second denies", []string{`true`, `resource.name == "other"`}, 0, model, nineAM, `authorization.rules[1]: resource.name == "other"`},
		{"missing map key denies", []string{`{"alpha": true}[resource.project + "x"]`}, 0, model, nineAM, "authorization.rules[0] ({\"alpha\": true}[resource.project + \"x\"]) could not be evaluated, which denies: no such key"},
		{"division by zero denies", []string{`1 / (size(resource.name) - size(resource.name)) == 1`}, 0, model, nineAM, "could not be evaluated"},
		{"an error in a negation still denies", []string{`!({"a": 1}["b"] == 1)`}, 0, model, nineAM, "could not be evaluated"},
		{"cost limit denies", []string{`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, a + b + c > 0)))`}, 0, model, nineAM, "cost limit exceeded"},
		{"a higher cost limit allows it", []string{`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, a + b + c > 0)))`}, 1_000_000, model, nineAM, ""},
		{"cost grows with attacker-sized input", []string{`resource.name.size() >= 0 && [resource.name, resource.name].all(n, n.matches("^(a|b)*$") || true)`}, 50, Resource{Kind: ResourceRun, Project: "alpha", Name: strings.Repeat("ab", 5000)}, nineAM, "cost limit exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Authorization = Authorization{Rules: tt.rules, CostLimit: tt.cost}
			a := newAccess(t, cfg)
			err := a.Authorize(ctx, mustAuth(t, a, anaToken), tt.r, Request{Action: PermRunsCreate, Time: tt.when})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("denied: %v", err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("allowed; want %q", tt.want)
			case !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tt.want):
				t.Errorf("got %v; want ErrDenied containing %q", err, tt.want)
			}
		})
	}

	// A cancelled request is an error, never an allow.
	cfg := testConfig()
	cfg.Authorization = Authorization{Rules: []string{`[1,2,3].all(x, x > 0)`}}
	a := newAccess(t, cfg)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Authorize(cctx, mustAuth(t, a, anaToken), model, Request{Action: PermRunsCreate}); err == nil {
		t.Error("a cancelled context allowed the request")
	}

	// A zero request time is now.
	a.now = func() time.Time { return nineAM }
	a2 := newAccess(t, Config{Projects: cfg.Projects, Tokens: cfg.Tokens[:1], Authorization: Authorization{Rules: []string{`request.time == timestamp("2026-12-01T09:00:00Z")`}}})
	a2.now = func() time.Time { return nineAM }
	if err := a2.Authorize(ctx, mustAuth(t, a2, anaToken), model, Request{Action: PermRunsRead}); err != nil {
		t.Errorf("a zero request time was not now: %v", err)
	}
}

// BenchmarkAuthorize measures the per-request cost of Authenticate and
// Authorize with the example rule, which the server pays on every call.
func BenchmarkAuthorize(b *testing.B) {
	a, err := New(testConfig(), testEnv)
	if err != nil {
		b.Fatal(err)
	}
	f, err := spec.Parse("b.yaml", []byte(allowAgentRun))
	if err != nil {
		b.Fatal(err)
	}
	r := RunResource("alpha", f.Spec)
	ctx := context.Background()
	for b.Loop() {
		p, err := a.Authenticate(anaToken)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Authorize(ctx, p, r, Request{Action: PermRunsRead}); !errors.Is(err, ErrDenied) {
			b.Fatal(err)
		}
	}
}
