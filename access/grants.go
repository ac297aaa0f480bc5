package access

import (
	"errors"
	"fmt"
	"strings"

	"evals.si/spec"
)

// ErrUngranted: a spec names worker secrets its project is not granted.
// An *UngrantedError wraps it and ErrDenied.
var ErrUngranted = errors.New("ungranted credentials")

// UngrantedError names the secrets (names only, never values) a project's
// run may not use.
type UngrantedError struct {
	Project string
	Names   []string // sorted
}

func (e *UngrantedError) Error() string {
	return fmt.Sprintf("the spec names worker secrets project %q is not granted: %s: add them under credentials.grants.%s in the server config",
		e.Project, strings.Join(e.Names, ", "), e.Project)
}

func (e *UngrantedError) Unwrap() []error { return []error{ErrUngranted, ErrDenied} }

// CheckGrants refuses s unless every secret it names (s.SecretNames:
// api_key_env, headers_env, env_from, and the connectors' default key
// variables) is granted to project.
func (a *Access) CheckGrants(project string, s *spec.Spec) error {
	granted := a.grants[project]
	var missing []string
	for _, n := range s.SecretNames() {
		if !granted[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return &UngrantedError{Project: project, Names: missing}
	}
	return nil
}
