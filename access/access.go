// Package access decides who may do what on a server: projects and their
// members, API tokens, roles and their permissions, authorization rules in
// CEL, the credentials each project is granted, and the programs a spec may
// run on a worker itself (outside any sandbox).
//
// It is pure Go and does no I/O: the server parses its config, builds one
// Access with New at start-up and calls it on every request:
//
//	p, err := acc.Authenticate(bearer)              // 401 on error
//	err = acc.Authorize(ctx, p, res, access.Request{Action: access.PermRunsCreate})
//	err = acc.CheckGrants(project, s)               // at submit
//	err = acc.CheckPrograms(access.WorkerPrograms(s))
//
// Every check fails closed: an unknown action, a principal of another
// project, a rule that errors or runs over its cost limit all deny.
package access

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Config is the access part of the server's config (server.yaml): the
// projects, tokens, authorization, credentials and agents sections.
type Config struct {
	Projects      []Project     `json:"projects,omitempty" yaml:"projects,omitempty"`
	Tokens        []Token       `json:"tokens,omitempty" yaml:"tokens,omitempty"`
	Authorization Authorization `json:"authorization,omitzero" yaml:"authorization,omitempty"`
	Credentials   Credentials   `json:"credentials,omitzero" yaml:"credentials,omitempty"`
	Agents        Agents        `json:"agents,omitzero" yaml:"agents,omitempty"`
}

// Project is a tenant: runs, datasets and grants belong to one project.
type Project struct {
	Name    string   `json:"name" yaml:"name"`
	Members []Member `json:"members,omitempty" yaml:"members,omitempty"`
}

// Member gives a user a role in a project.
type Member struct {
	User string `json:"user" yaml:"user"`
	Role string `json:"role" yaml:"role"`
}

// Token is an API token. The secret is never in the config: SHA256 holds
// the hex digest of the token, or TokenEnv names the server's variable
// holding the token itself. Exactly one kind:
//   - a user token: User and Project (the user must be a member; Role, when
//     set, may narrow the member's role, never widen it);
//   - a project token: Project and Role, no user;
//   - a service token: Service (only "worker"), optionally Projects to
//     confine the worker to some projects.
type Token struct {
	Name     string   `json:"name" yaml:"name"`
	User     string   `json:"user,omitempty" yaml:"user,omitempty"`
	Project  string   `json:"project,omitempty" yaml:"project,omitempty"`
	Role     string   `json:"role,omitempty" yaml:"role,omitempty"`
	Service  string   `json:"service,omitempty" yaml:"service,omitempty"`
	Projects []string `json:"projects,omitempty" yaml:"projects,omitempty"`
	SHA256   string   `json:"sha256,omitempty" yaml:"sha256,omitempty"`
	TokenEnv string   `json:"token_env,omitempty" yaml:"token_env,omitempty"`
}

// Authorization holds the CEL rules every request must satisfy.
type Authorization struct {
	// Rules are CEL expressions over principal, resource and request; each
	// must return true for a request to be allowed.
	Rules []string `json:"rules,omitempty" yaml:"rules,omitempty"`
	// CostLimit bounds one rule's evaluation cost (default
	// DefaultCostLimit); a rule that exceeds it denies.
	CostLimit uint64 `json:"cost_limit,omitempty" yaml:"cost_limit,omitempty"`
}

// Credentials says which worker secrets each project's runs may name.
type Credentials struct {
	// Grants maps a project to the variable names (api_key_env,
	// headers_env, env_from values) its runs may use.
	Grants map[string][]string `json:"grants,omitempty" yaml:"grants,omitempty"`
}

// Agents lists what a spec may run on a worker outside the sandbox.
type Agents struct {
	// TrustedCommands are argvs of stdio MCP servers and external harness
	// commands. A spec's command must equal an entry element by element
	// (argv[0] compared as written, never looked up in PATH); an entry
	// whose last element is "..." also matches any further arguments.
	TrustedCommands [][]string `json:"trusted_commands,omitempty" yaml:"trusted_commands,omitempty"`
	// TrustedPython are module:Class harness classes and module:function
	// checker parsers, compared as written.
	TrustedPython []string `json:"trusted_python,omitempty" yaml:"trusted_python,omitempty"`
	// TrustedEnv are the variable names a spec may set in the environment
	// of a worker program (tools.mcp[].env): any other name is refused,
	// since variables such as LD_PRELOAD, NODE_OPTIONS or
	// npm_config_registry make a trusted command run other code.
	TrustedEnv []string `json:"trusted_env,omitempty" yaml:"trusted_env,omitempty"`
}

// AnyArgs, as the last element of a trusted_commands entry, lets a command
// have further arguments after the entry's.
const AnyArgs = "..."

// DefaultCostLimit is a rule's default evaluation cost limit: far above
// what a rule over these few fields costs, low enough that a rule
// iterating over attacker-sized inputs stops within microseconds.
const DefaultCostLimit = 10_000

// MinTokenLength is the shortest token a token_env variable may hold: a
// guessable token is no authentication.
const MinTokenLength = 16

// Permissions.
const (
	PermRunsRead      = "runs.read"
	PermRunsCreate    = "runs.create"
	PermRunsCancel    = "runs.cancel"
	PermDatasetsRead  = "datasets.read"
	PermDatasetsWrite = "datasets.write"
	PermProjectsAdmin = "projects.admin"
	PermWorkerLease   = "worker.lease"
)

// Member roles.
const (
	RoleViewer = "viewer"
	RoleEditor = "editor"
	RoleAdmin  = "admin"
	// roleWorker is a service token's role, never a member's.
	roleWorker    = "worker"
	serviceWorker = "worker"
)

// Principal kinds.
const (
	KindUser   = "user"   // a user's token
	KindToken  = "token"  // a project token, no user
	KindWorker = "worker" // a worker's service token
)

// emptySHA256 is the digest of the empty token, which no token may have.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// rolePerms lists each role's permissions; each role holds those of the
// roles before it.
var rolePerms = map[string][]string{
	RoleViewer: {PermRunsRead, PermDatasetsRead},
	RoleEditor: {PermRunsRead, PermDatasetsRead, PermRunsCreate, PermRunsCancel, PermDatasetsWrite},
	RoleAdmin:  {PermRunsRead, PermDatasetsRead, PermRunsCreate, PermRunsCancel, PermDatasetsWrite, PermProjectsAdmin},
	roleWorker: {PermWorkerLease},
}

// roleRank orders the member roles, for a token narrowing its user's.
var roleRank = map[string]int{RoleViewer: 1, RoleEditor: 2, RoleAdmin: 3}

// Permissions lists every permission an Action may name.
func Permissions() []string {
	return []string{PermRunsRead, PermRunsCreate, PermRunsCancel, PermDatasetsRead, PermDatasetsWrite, PermProjectsAdmin, PermWorkerLease}
}

// RolePermissions lists the permissions of a member role (viewer, editor,
// admin); nil for an unknown role.
func RolePermissions(role string) []string {
	if _, ok := roleRank[role]; !ok {
		return nil
	}
	return slices.Clone(rolePerms[role])
}

// Access answers the server's access questions. It is immutable after New
// and safe for concurrent use.
type Access struct {
	tokens  []token
	rules   []rule
	grants  map[string]map[string]bool
	cmds    [][]string
	python  map[string]bool
	env     map[string]bool
	members map[string]map[string]string // project → user → role
	now     func() time.Time
}

// token is a configured token with its secret's digest.
type token struct {
	digest    [sha256.Size]byte
	principal Principal
}

// New validates cfg and builds an Access. getenv reads the variables
// token_env names (os.Getenv in the server). Errors name the config field.
func New(cfg Config, getenv func(string) string) (*Access, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	a := &Access{
		grants:  map[string]map[string]bool{},
		python:  map[string]bool{},
		env:     map[string]bool{},
		members: map[string]map[string]string{},
		now:     time.Now,
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}

	for i, p := range cfg.Projects {
		f := fmt.Sprintf("projects[%d]", i)
		switch {
		case !validName(p.Name, "-_."):
			bad(f+".name", "project name %q: use letters, digits, '-', '_' and '.'", p.Name)
			continue
		case a.members[p.Name] != nil:
			bad(f+".name", "project %q is listed twice", p.Name)
			continue
		}
		m := map[string]string{}
		a.members[p.Name] = m
		for j, mem := range p.Members {
			mf := fmt.Sprintf("%s.members[%d]", f, j)
			if !validName(mem.User, "-_.@") {
				bad(mf+".user", "user name %q: use letters, digits, '-', '_', '.' and '@'", mem.User)
				continue
			}
			if _, dup := m[mem.User]; dup {
				bad(mf+".user", "user %q is listed twice in project %q", mem.User, p.Name)
			}
			if _, ok := roleRank[mem.Role]; !ok {
				bad(mf+".role", "unknown role %q: use viewer, editor or admin", mem.Role)
			}
			m[mem.User] = mem.Role
		}
	}

	names := map[string]bool{}
	digests := map[[sha256.Size]byte]string{}
	for i, t := range cfg.Tokens {
		f := fmt.Sprintf("tokens[%d]", i)
		if t.Name == "" {
			bad(f+".name", "a token needs a name")
		} else if names[t.Name] {
			bad(f+".name", "token %q is listed twice", t.Name)
		}
		names[t.Name] = true
		p, err := a.tokenPrincipal(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (token %q): %w", f, t.Name, err))
			continue
		}
		d, err := tokenDigest(t, getenv)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (token %q): %w", f, t.Name, err))
			continue
		}
		if other, dup := digests[d]; dup {
			bad(f, "token %q has the same secret as token %q: give each token its own", t.Name, other)
			continue
		}
		digests[d] = t.Name
		a.tokens = append(a.tokens, token{digest: d, principal: p})
	}

	rules, err := compileRules(cfg.Authorization)
	if err != nil {
		errs = append(errs, err)
	}
	a.rules = rules

	for project, granted := range cfg.Credentials.Grants {
		f := "credentials.grants." + project
		if a.members[project] == nil {
			bad(f, "no project %q is configured under projects", project)
			continue
		}
		set := map[string]bool{}
		for j, n := range granted {
			if !validEnvName(n) {
				bad(fmt.Sprintf("%s[%d]", f, j), "%q is not a variable name", n)
			}
			set[n] = true
		}
		a.grants[project] = set
	}

	for i, c := range cfg.Agents.TrustedCommands {
		f := fmt.Sprintf("agents.trusted_commands[%d]", i)
		switch {
		case len(c) == 0 || c[0] == "" || c[0] == AnyArgs:
			bad(f, "an entry is a command's argv, e.g. [npx, -y, @modelcontextprotocol/server-filesystem]")
			continue
		case slices.Contains(c[:len(c)-1], AnyArgs):
			bad(f, "%q may only be the last element", AnyArgs)
			continue
		}
		a.cmds = append(a.cmds, slices.Clone(c))
	}
	for i, ref := range cfg.Agents.TrustedPython {
		if !pythonRef.MatchString(ref) && !pathRef.MatchString(ref) {
			bad(fmt.Sprintf("agents.trusted_python[%d]", i), "%q is not module:Class (or module:function)", ref)
		}
		a.python[ref] = true
	}
	for i, n := range cfg.Agents.TrustedEnv {
		if !validEnvName(n) {
			bad(fmt.Sprintf("agents.trusted_env[%d]", i), "%q is not a variable name", n)
		}
		a.env[n] = true
	}

	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("access config: %w", err)
	}
	return a, nil
}

// tokenPrincipal is who a token authenticates as.
func (a *Access) tokenPrincipal(t Token) (Principal, error) {
	switch {
	case t.Service != "":
		if t.Service != serviceWorker {
			return Principal{}, fmt.Errorf("service %q: the only service is worker", t.Service)
		}
		if t.User != "" || t.Project != "" || t.Role != "" {
			return Principal{}, errors.New("a service token has no user, project or role (use projects: [...] to confine a worker)")
		}
		for _, p := range t.Projects {
			if a.members[p] == nil {
				return Principal{}, fmt.Errorf("projects: no project %q is configured under projects", p)
			}
		}
		return Principal{ID: t.Name, Kind: KindWorker, Role: roleWorker, Projects: slices.Clone(t.Projects), Token: t.Name}, nil
	case len(t.Projects) > 0:
		return Principal{}, errors.New("projects: only a service token lists projects; a user or project token has one project")
	case t.Project == "":
		return Principal{}, errors.New("project: a user or project token belongs to one project")
	case a.members[t.Project] == nil:
		return Principal{}, fmt.Errorf("project: no project %q is configured under projects", t.Project)
	}
	if t.Role != "" {
		if _, ok := roleRank[t.Role]; !ok {
			return Principal{}, fmt.Errorf("role: unknown role %q: use viewer, editor or admin", t.Role)
		}
	}
	if t.User == "" {
		if t.Role == "" {
			return Principal{}, errors.New("role: a project token (no user) needs a role")
		}
		return Principal{ID: t.Name, Kind: KindToken, Project: t.Project, Role: t.Role, Token: t.Name}, nil
	}
	member, ok := a.members[t.Project][t.User]
	if !ok {
		return Principal{}, fmt.Errorf("user: %q is not a member of project %q", t.User, t.Project)
	}
	role := member
	if t.Role != "" {
		if roleRank[t.Role] > roleRank[member] {
			return Principal{}, fmt.Errorf("role: %q exceeds the user's role %q in project %q", t.Role, member, t.Project)
		}
		role = t.Role
	}
	return Principal{ID: t.User, Kind: KindUser, Project: t.Project, Role: role, Token: t.Name}, nil
}

// tokenDigest is the SHA-256 of a token's secret.
func tokenDigest(t Token, getenv func(string) string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	switch {
	case t.SHA256 != "" && t.TokenEnv != "":
		return d, errors.New("set one of sha256 and token_env, not both")
	case t.SHA256 != "":
		b, err := hex.DecodeString(t.SHA256)
		if err != nil || len(b) != sha256.Size {
			return d, errors.New("sha256: want the 64 hex digits of the token's SHA-256 (sha256sum)")
		}
		if strings.EqualFold(t.SHA256, emptySHA256) {
			return d, errors.New("sha256: this is the digest of an empty token")
		}
		copy(d[:], b)
		return d, nil
	case t.TokenEnv != "":
		v := getenv(t.TokenEnv)
		if v == "" {
			return d, fmt.Errorf("token_env: the variable %s is not set in the server's environment", t.TokenEnv)
		}
		if len(v) < MinTokenLength {
			return d, fmt.Errorf("token_env: the token in %s is shorter than %d characters: use a random one (openssl rand -hex 32)", t.TokenEnv, MinTokenLength)
		}
		return sha256.Sum256([]byte(v)), nil
	}
	return d, errors.New("a token needs its secret: sha256 (its digest) or token_env (the variable holding it)")
}

// validName reports whether s is a name of letters, digits and the
// punctuation in extra: project names appear in paths
// (promoted/<project>/...), so they stay plain.
func validName(s, extra string) bool {
	if s == "" || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
