// Package telecom is tau2-bench's telecom domain: a carrier's customer
// service, under dual control. The agent works on the carrier's database
// (customers, lines, bills; db.toml) with TelecomTools; the user works on
// their own phone (user_db.toml) with TelecomUserTools; after every call
// the environment carries the carrier's state over to the phone (is the
// line active, is roaming allowed, is there a bill to pay) and the
// phone's payment back to the carrier.
package telecom

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"evals.si/harness/taubench/domain"
)

// toolsJSON is tau2's description of both sides' tools, recorded by
// scripts/tau2-reference/generate.py.
//
//go:embed tools.json
var toolsJSON []byte

// The files of tau2's telecom data directory.
const (
	dbFile          = "db.toml"
	userDBFile      = "user_db.toml"
	mainPolicyFile  = "main_policy.md"
	techSupportFile = "tech_support_manual.md"
)

// Data is the telecom domain's data, read once.
type Data struct {
	db     []byte // db.toml as JSON
	userDB []byte // user_db.toml
	policy string
}

var _ domain.Data = (*Data)(nil)

// Load reads the telecom data directory (tau2's
// data/tau2/domains/telecom): both databases, and the policy as tau2
// composes it for the default "manual" tech-support policy.
func Load(dir string) (domain.Data, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("telecom: reading %s in %s: %w; set data_dir= or TAU2_DATA_DIR to tau2's data directory", name, dir, err)
		}
		return b, nil
	}
	rawDB, err := read(dbFile)
	if err != nil {
		return nil, err
	}
	db, err := tomlToJSON(rawDB)
	if err != nil {
		return nil, fmt.Errorf("telecom: %s in %s: %w", dbFile, dir, err)
	}
	if _, err := decodeDB(db); err != nil {
		return nil, fmt.Errorf("telecom: %s in %s: %w", dbFile, dir, err)
	}
	userDB, err := read(userDBFile)
	if err != nil {
		return nil, err
	}
	if _, err := LoadUserDB(userDB); err != nil {
		return nil, fmt.Errorf("telecom: %s in %s: %w", userDBFile, dir, err)
	}
	mainPolicy, err := read(mainPolicyFile)
	if err != nil {
		return nil, err
	}
	techSupport, err := read(techSupportFile)
	if err != nil {
		return nil, err
	}
	if _, err := domain.ParseTools(toolsJSON, "agent"); err != nil {
		return nil, fmt.Errorf("telecom: the embedded tools.json: %w", err)
	}
	policy := "<main_policy>\n" + universalNewlines(mainPolicy) + "\n</main_policy>\n" +
		"<tech_support_policy>\n" + universalNewlines(techSupport) + "\n</tech_support_policy>"
	return &Data{db: db, userDB: userDB, policy: policy}, nil
}

// universalNewlines is a file's content as Python reads it in text mode: universal
// newlines.
func universalNewlines(b []byte) string {
	return strings.ReplaceAll(strings.ReplaceAll(string(b), "\r\n", "\n"), "\r", "\n")
}

// Policy is the agent's policy: the main policy, then the tech-support
// manual, each in its tag.
func (d *Data) Policy() string { return d.policy }

// NewEnv returns an environment over fresh copies of both databases.
func (d *Data) NewEnv() (domain.Env, error) {
	db, err := decodeDB(d.db)
	if err != nil {
		return nil, fmt.Errorf("telecom: %s: %w", dbFile, err)
	}
	userDB, err := LoadUserDB(d.userDB)
	if err != nil {
		return nil, fmt.Errorf("telecom: %s: %w", userDBFile, err)
	}
	return &Env{agent: NewTools(db), user: NewUserTools(userDB)}, nil
}

func decodeDB(data []byte) (*TelecomDB, error) {
	var db TelecomDB
	if err := domain.DecodeStrict(data, &db); err != nil {
		return nil, err
	}
	return &db, nil
}

// tomlToJSON turns a TOML document into JSON the models decode strictly.
// TOML's own dates and times become the ISO strings pydantic would parse
// them from (tau2's data writes its dates as strings anyway).
func tomlToJSON(data []byte) ([]byte, error) {
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return nil, err
	}
	b, err := json.Marshal(jsonable(doc))
	if err != nil {
		return nil, fmt.Errorf("converting to JSON: %w", err)
	}
	return b, nil
}

func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case time.Time:
		// The toml package marks local (offset-less) values by these zone
		// names.
		switch x.Location().String() {
		case "date-local":
			return x.Format(time.DateOnly)
		case "datetime-local":
			return x.Format("2006-01-02T15:04:05.999999")
		case "time-local":
			return x.Format("15:04:05.999999")
		}
		return x.Format("2006-01-02T15:04:05.999999Z07:00")
	}
	return v
}

// Env is one telecom environment.
type Env struct {
	agent *Tools
	user  *UserTools
}

var _ domain.Env = (*Env)(nil)

// Agent is the carrier's toolkit.
func (e *Env) Agent() domain.Toolkit { return e.agent }

// User is the phone's toolkit.
func (e *Env) User() domain.Toolkit { return e.user }

// Sync is TelecomEnvironment.sync_tools: once the user has a phone
// number, the phone learns from the carrier whether its line is active,
// roaming allowed and the data allowance used up; a payment the user made
// marks the bill paid; and a bill awaiting payment becomes the phone's
// payment request.
func (e *Env) Sync() error {
	udb, ok := e.user.DB().(*UserDB)
	if !ok {
		return fmt.Errorf("telecom: the user toolkit's database is a %T, not a *UserDB", e.user.DB())
	}
	s := &udb.Surroundings
	if s.PhoneNumber == nil {
		return nil
	}
	phone := *s.PhoneNumber
	line, err := e.agent.lineByPhone(phone)
	if err != nil {
		return err
	}
	s.LineActive = line.Status == LineActive
	s.RoamingAllowed = line.RoamingEnabled
	plan, err := e.agent.planByID(strArg(line.PlanID))
	if err != nil {
		return err
	}
	s.MobileDataUsageExceeded = line.DataUsedGB >= plan.DataLimitGB+line.DataRefuelingGB

	if pr := s.PaymentRequest; pr != nil && pr.Paid {
		if err := e.agent.setBillToPaid(pr.BillID); err != nil {
			return err
		}
		s.PaymentRequest = nil
	}
	if s.PaymentRequest == nil {
		c, err := e.agent.customerByPhone(strArg(phone))
		if err != nil {
			return err
		}
		waiting, err := e.agent.billsAwaitingPayment(c)
		if err != nil {
			return err
		}
		if len(waiting) > 0 {
			s.PaymentRequest = &PaymentRequest{BillID: waiting[0].BillID, AmountDue: waiting[0].TotalDue}
		}
	}
	return nil
}
