package spec

import (
	"strings"
	"testing"
)

// The fields of a task's phases (users, service, healthcheck, the
// checker's network and fresh sandbox) are checked with errors that say
// what, where and what to do; well-formed ones pass.
func TestValidatePhaseFields(t *testing.T) {
	const agentRun = "dataset:\n  records: [{id: a, input: x}]\ntarget: {agent: {oracle: {}}}\n"
	for _, tc := range []struct {
		name, env string
		want      []string
	}{
		{"all well formed", `{user: "app:app", setup: [{run: useradd app, user: root}, "echo hi"],
  service: {command: [python3, s.py], user: "1000", workdir: /app},
  healthcheck: {command: [curl, -sf, "http://localhost:8000/"], retries: 0, interval: 1s, user: app},
  checker: {command: [pytest], user: "1000:1000", network: allowlist, allow_hosts: ["pypi.org:443"], fresh: true, patch_file: /tmp/p.diff}}`, nil},
		{"bad users", `{user: "a b", setup: [{run: x, user: ":g"}], service: {command: [s], user: "u:"}, checker: {command: [c], user: "u\u0007"}}`,
			[]string{
				`t.yaml:4:21: bad user "a b"; write a user name or uid of the image, optionally with :group or :gid (e.g. app, 1000, app:app, 1000:1000)`,
				`t.yaml:4:51: bad user ":g"; write a user name or uid of the image, optionally with :group or :gid (e.g. app, 1000, app:app, 1000:1000)`,
				`t.yaml:4:89: bad user "u:"; write a user name or uid of the image, optionally with :group or :gid (e.g. app, 1000, app:app, 1000:1000)`,
				`t.yaml:4:126: bad user "u\a"; write a user name or uid of the image, optionally with :group or :gid (e.g. app, 1000, app:app, 1000:1000)`,
			}},
		{"empty commands and negative retries", `{service: {command: []}, healthcheck: {command: [""], retries: -1}}`,
			[]string{
				`t.yaml:4:25: service.command is empty; give the service's argv, e.g. [python3, server.py] (a Dockerfile's ENTRYPOINT followed by CMD)`,
				`t.yaml:4:53: healthcheck.command is empty; give the check's argv, e.g. [curl, -sf, http://localhost:8000/health], or [/bin/sh, -c, CMD]`,
				`t.yaml:4:77: healthcheck.retries must not be negative; use 0 for Docker's default (3), or a positive count`,
			}},
		{"checker network", `{checker: {command: [c], network: open}}`,
			[]string{`t.yaml:4:48: bad checker network "open"; use one of deny, allowlist, allow`}},
		{"allowlist without hosts", `{checker: {command: [c], network: allowlist}}`,
			[]string{`t.yaml:4:48: checker network allowlist needs allow_hosts; list the hosts the checker may reach in checker.allow_hosts as host:port`}},
		{"hosts without allowlist", `{checker: {command: [c], allow_hosts: ["a:1"]}}`,
			[]string{`t.yaml:4:39: checker.allow_hosts is only used with checker network: allowlist; set checker.network: allowlist`}},
		{"fresh without patch_file", `{checker: {command: [c], fresh: true}}`,
			[]string{`t.yaml:4:15: a fresh checker needs patch_file: the agent's diff is all that reaches it; set patch_file to where the checker reads the agent's diff, e.g. /tmp/agent.patch`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("t.yaml", []byte(agentRun+"environment: "+tc.env+"\n"))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = f.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			checkErrors(t, err, tc.want)
		})
	}
}

// Environment.Validate (a record's merged environment) checks the same.
func TestEnvironmentValidatePhaseFields(t *testing.T) {
	e := &Environment{Checker: &Checker{Command: []string{"c"}, Fresh: true}}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "environment.checker.patch_file") {
		t.Fatalf("Validate: %v", err)
	}
}
