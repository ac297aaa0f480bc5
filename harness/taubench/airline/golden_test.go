package airline

import (
	"os"
	"path/filepath"
	"testing"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/domaintest"
	"evals.si/harness/taubench/pyjson"
	"evals.si/internal/testenv"
)

// policyPath is tau2's airline policy in the shared benchmark data, which
// is not in the repository.
const policyPath = "../../../../shared/benchdata/tau2/airline/policy.md"

// testData loads the domain from testdata/db.json and the shared policy,
// assembled in tau2's layout. Without the policy it skips, unless
// EVALSI_STRICT=1.
func testData(t *testing.T) domain.Data {
	t.Helper()
	policy, err := os.ReadFile(policyPath)
	if err != nil {
		testenv.Missing(t, "tau2's airline policy", err.Error())
	}
	db, err := os.ReadFile("testdata/db.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"db.json": db, "policy.md": policy} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestGolden(t *testing.T) {
	domaintest.Check(t, testData(t), "testdata/traces.json")
}

func TestTools(t *testing.T) {
	env, err := testData(t).NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	domaintest.CheckTools(t, env.Agent())
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil {
		t.Fatal("Load of an empty directory succeeded")
	}
	if err := os.WriteFile(filepath.Join(dir, "db.json"), []byte(`{"flights": {}, "users": {}, "reservations": {}, "extra": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("Load accepted a database with an unknown field")
	}
}

// Environments do not share the database.
func TestEnvsAreIndependent(t *testing.T) {
	d := testData(t)
	a, err := d.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	before, err := pyjson.Hash(b.Agent().DB())
	if err != nil {
		t.Fatal(err)
	}
	args := domain.Args{"reservation_id": []byte(`"EHGLP3"`)}
	if _, err := domain.CallTool(a.Agent(), "cancel_reservation", args); err != nil {
		t.Fatal(err)
	}
	args = domain.Args{"user_id": []byte(`"mia_li_3668"`), "amount": []byte(`100`)}
	if _, err := domain.CallTool(a.Agent(), "send_certificate", args); err != nil {
		t.Fatal(err)
	}
	after, err := pyjson.Hash(b.Agent().DB())
	if err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Error("a change in one environment changed another")
	}
}
