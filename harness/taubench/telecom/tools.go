package telecom

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
)

// Tools is tau2's TelecomTools: the agent's tools over the carrier's
// database, and the set-up and assertion functions tasks call on the
// assistant side.
type Tools struct {
	db *TelecomDB
	// newBillID names the draft bill a charge creates when the customer
	// has none: tau2 takes "B" and eight hex digits of a random uuid4.
	newBillID func() string
}

var _ domain.Toolkit = (*Tools)(nil)

// NewTools returns the agent's toolkit over db.
func NewTools(db *TelecomDB) *Tools {
	return &Tools{db: db, newBillID: randomBillID}
}

func randomBillID() string {
	var b [4]byte
	rand.Read(b[:]) // never fails (it crashes the program instead)
	return "B" + hex.EncodeToString(b[:])
}

// Class is the Python class name.
func (t *Tools) Class() string { return "TelecomTools" }

// DB is the carrier's database.
func (t *Tools) DB() any { return t.db }

// UpdateDB merges patch into the database, as tau2's update_db does.
func (t *Tools) UpdateDB(patch json.RawMessage) error { return domain.Merge(t.db, patch) }

// Tools are tau2's schemas of the agent's tools (Load has checked the
// embedded file parses).
func (t *Tools) Tools() []domain.Schema {
	s, _ := domain.ParseTools(toolsJSON, "agent")
	return s
}

// Funcs lists the tools, in tau2's order, then the functions tasks call.
func (t *Tools) Funcs() []domain.Func {
	return []domain.Func{
		agentFunc("get_customer_by_phone", domain.Read, t.getCustomerByPhone, "phone_number"),
		agentFunc("get_customer_by_id", domain.Read, t.getCustomerByID, "customer_id"),
		agentFunc("get_customer_by_name", domain.Read, t.getCustomerByName, "full_name", "dob"),
		agentFunc("get_details_by_id", domain.Read, t.getDetailsByID, "id"),
		agentFunc("suspend_line", domain.Write, t.suspendLine, "customer_id", "line_id", "reason"),
		agentFunc("resume_line", domain.Write, t.resumeLine, "customer_id", "line_id"),
		agentFunc("get_bills_for_customer", domain.Read, t.getBillsForCustomer, "customer_id", "limit?"),
		agentFunc("send_payment_request", domain.Write, t.sendPaymentRequest, "customer_id", "bill_id"),
		agentFunc("get_data_usage", domain.Read, t.getDataUsage, "customer_id", "line_id"),
		agentFunc("enable_roaming", domain.Write, t.enableRoaming, "customer_id", "line_id"),
		agentFunc("disable_roaming", domain.Write, t.disableRoaming, "customer_id", "line_id"),
		agentFunc("transfer_to_human_agents", domain.Generic, transferToHumanAgents, "summary"),
		agentFunc("refuel_data", domain.Write, t.refuelData, "customer_id", "line_id", "gb_amount"),

		envFunc("get_available_plan_ids", t.getAvailablePlanIDs),
		envFunc("set_data_usage", t.setDataUsage, "customer_id", "line_id", "data_used_gb"),
		envFunc("suspend_line_for_overdue_bill", t.suspendLineForOverdueBill, "customer_id", "line_id", "new_bill_id", "contract_ended"),
		envFunc("assert_data_refueling_amount", t.assertDataRefuelingAmount, "customer_id", "line_id", "expected_amount"),
		envFunc("assert_line_status", t.assertLineStatus, "customer_id", "line_id", "expected_status"),
		envFunc("assert_overdue_bill_exists", t.assertOverdueBillExists, "customer_id", "overdue_bill_id"),
		envFunc("assert_no_overdue_bill", t.assertNoOverdueBill, "overdue_bill_id"),
	}
}

// agentFunc is a tool; a parameter named "x?" has a default. tau2 infers
// mutates_state from the type, and no telecom tool overrides it.
func agentFunc(name string, typ domain.ToolType, run func(domain.Args) (any, error), params ...string) domain.Func {
	f := envFunc(name, run, params...)
	f.Tool, f.Type, f.Mutates = true, typ, typ == domain.Write
	return f
}

// envFunc is a set-up or assertion function: not offered to the model,
// reached by name from a task's initialization_actions or env_assertions.
func envFunc(name string, run func(domain.Args) (any, error), params ...string) domain.Func {
	f := domain.Func{Name: name, Run: run}
	for _, p := range params {
		if n := len(p); p[n-1] == '?' {
			f.Params = append(f.Params, domain.Param{Name: p[:n-1], Optional: true})
		} else {
			f.Params = append(f.Params, domain.Param{Name: p})
		}
	}
	return f
}

// argsOf reads the named arguments as Python values.
func argsOf(a domain.Args, names ...string) ([]argValue, error) {
	out := make([]argValue, len(names))
	for i, n := range names {
		v, err := argOf(a, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Lookups. Each fails with tau2's ValueError text.

func (t *Tools) customerByID(id argValue) (*Customer, error) {
	for i := range t.db.Customers {
		if id.is(t.db.Customers[i].CustomerID) {
			return &t.db.Customers[i], nil
		}
	}
	return nil, fmt.Errorf("Customer with ID %s not found", id)
}

// customerByPhone finds the customer whose contact number, or one of
// whose lines' numbers, is phone; a customer's line that is missing from
// the database is an error, as it is in tau2.
func (t *Tools) customerByPhone(phone argValue) (*Customer, error) {
	for i := range t.db.Customers {
		c := &t.db.Customers[i]
		if phone.is(c.PhoneNumber) {
			return c, nil
		}
		for _, id := range c.LineIDs {
			l, err := t.lineByID(strArg(id))
			if err != nil {
				return nil, err
			}
			if phone.is(l.PhoneNumber) {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("Customer with phone number %s not found", phone)
}

func (t *Tools) lineByPhone(phone string) (*Line, error) {
	for i := range t.db.Lines {
		if t.db.Lines[i].PhoneNumber == phone {
			return &t.db.Lines[i], nil
		}
	}
	return nil, fmt.Errorf("Line with phone number %s not found", phone)
}

func (t *Tools) lineByID(id argValue) (*Line, error) {
	for i := range t.db.Lines {
		if id.is(t.db.Lines[i].LineID) {
			return &t.db.Lines[i], nil
		}
	}
	return nil, fmt.Errorf("Line with ID %s not found", id)
}

func (t *Tools) planByID(id argValue) (*Plan, error) {
	for i := range t.db.Plans {
		if id.is(t.db.Plans[i].PlanID) {
			return &t.db.Plans[i], nil
		}
	}
	return nil, fmt.Errorf("Plan with ID %s not found", id)
}

func (t *Tools) deviceByID(id argValue) (*Device, error) {
	for i := range t.db.Devices {
		if id.is(t.db.Devices[i].DeviceID) {
			return &t.db.Devices[i], nil
		}
	}
	return nil, fmt.Errorf("Device with ID %s not found", id)
}

func (t *Tools) billByID(id argValue) (*Bill, error) {
	for i := range t.db.Bills {
		if id.is(t.db.Bills[i].BillID) {
			return &t.db.Bills[i], nil
		}
	}
	return nil, fmt.Errorf("Bill with ID %s not found", id)
}

// targetLine is the customer's line: the customer must exist and list it.
func (t *Tools) targetLine(customerID, lineID argValue) (*Line, error) {
	c, err := t.customerByID(customerID)
	if err != nil {
		return nil, err
	}
	if !lineID.in(c.LineIDs) {
		return nil, fmt.Errorf("Line %s not found for customer %s", lineID, customerID)
	}
	return t.lineByID(lineID)
}

// billsAwaitingPayment are the customer's bills awaiting payment, in the
// order the customer lists them.
func (t *Tools) billsAwaitingPayment(c *Customer) ([]*Bill, error) {
	var out []*Bill
	for _, id := range c.BillIDs {
		b, err := t.billByID(strArg(id))
		if err != nil {
			return nil, err
		}
		if b.Status == BillAwaitingPayment {
			out = append(out, b)
		}
	}
	return out, nil
}

// setBillToPaid is _set_bill_to_paid, which the environment's sync calls
// once the user has paid.
func (t *Tools) setBillToPaid(id string) error {
	b, err := t.billByID(strArg(id))
	if err != nil {
		return err
	}
	b.Status = BillPaid
	return nil
}

// The tools.

func (t *Tools) getCustomerByPhone(a domain.Args) (any, error) {
	v, err := argsOf(a, "phone_number")
	if err != nil {
		return nil, err
	}
	return t.customerByPhone(v[0])
}

func (t *Tools) getCustomerByID(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id")
	if err != nil {
		return nil, err
	}
	return t.customerByID(v[0])
}

func (t *Tools) getCustomerByName(a domain.Args) (any, error) {
	v, err := argsOf(a, "full_name", "dob")
	if err != nil {
		return nil, err
	}
	name, dob := v[0], v[1]
	matches := []*Customer{}
	for i := range t.db.Customers {
		c := &t.db.Customers[i]
		if name.kind != kindStr {
			return nil, noAttributeError(name, "lower")
		}
		// strings.ToLower is str.lower() but for a few special cases
		// (final sigma, dotted capital I) that names here do not have.
		if strings.ToLower(c.FullName) == strings.ToLower(name.s) && dob.is(c.DateOfBirth) {
			matches = append(matches, c)
		}
	}
	return matches, nil
}

func (t *Tools) getDetailsByID(a domain.Args) (any, error) {
	v, err := argsOf(a, "id")
	if err != nil {
		return nil, err
	}
	id := v[0]
	if id.kind != kindStr {
		return nil, noAttributeError(id, "startswith")
	}
	if id.s == "" {
		return nil, fmt.Errorf("Unknown ID format or type: %s", id)
	}
	switch id.s[0] {
	case 'L':
		return t.lineByID(id)
	case 'D':
		return t.deviceByID(id)
	case 'B':
		return t.billByID(id)
	case 'C':
		return t.customerByID(id)
	case 'P':
		return t.planByID(id)
	}
	return nil, fmt.Errorf("Unknown ID format or type: %s", id)
}

func (t *Tools) suspendLine(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id")
	if err != nil {
		return nil, err
	}
	l, err := t.targetLine(v[0], v[1])
	if err != nil {
		return nil, err
	}
	if l.Status != LineActive {
		return nil, fmt.Errorf("Line must be active to suspend")
	}
	l.Status = LineSuspended
	d := today()
	l.SuspensionStartDate = &d
	return lineResult("Line suspended successfully. $5/month holding fee will apply.", l), nil
}

func (t *Tools) resumeLine(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id")
	if err != nil {
		return nil, err
	}
	l, err := t.targetLine(v[0], v[1])
	if err != nil {
		return nil, err
	}
	if l.Status != LineSuspended && l.Status != LinePendingActivation {
		return nil, fmt.Errorf("Line must be suspended to resume")
	}
	l.Status = LineActive
	l.SuspensionStartDate = nil
	return lineResult("Line resumed successfully", l), nil
}

// lineResult is the {"message", "line"} dict suspend_line and
// resume_line return.
func lineResult(msg string, l *Line) *pyjson.Dict[any] {
	var d pyjson.Dict[any]
	d.Set("message", msg)
	d.Set("line", l)
	return &d
}

func (t *Tools) getBillsForCustomer(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id")
	if err != nil {
		return nil, err
	}
	c, err := t.customerByID(v[0])
	if err != nil {
		return nil, err
	}
	bills := []*Bill{}
	for _, id := range c.BillIDs {
		b, err := t.billByID(strArg(id))
		if err != nil {
			return nil, err
		}
		bills = append(bills, b)
	}
	// sorted(reverse=True) is stable: bills issued the same day keep
	// their order.
	sort.SliceStable(bills, func(i, j int) bool { return bills[j].IssueDate.before(bills[i].IssueDate) })
	end := min(12, len(bills))
	if raw, ok := a["limit"]; ok {
		limit, err := parseArg(raw)
		if err != nil {
			return nil, fmt.Errorf("argument limit: %w", err)
		}
		switch limit.kind {
		case kindNone: // bills[:None]
			end = len(bills)
		case kindBool, kindInt:
			end = sliceBound(limit, len(bills))
		default:
			return nil, fmt.Errorf("slice indices must be integers or None or have an __index__ method")
		}
	}
	return bills[:end], nil
}

// sliceBound is where seq[:v] ends for an int v, as Python clips it: a
// negative bound counts from the end.
func sliceBound(v argValue, n int) int {
	if v.num < 0 {
		if -v.num >= float64(n) {
			return 0
		}
		return n + int(v.num)
	}
	if v.num >= float64(n) {
		return n
	}
	return int(v.num)
}

func (t *Tools) sendPaymentRequest(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "bill_id")
	if err != nil {
		return nil, err
	}
	customerID, billID := v[0], v[1]
	c, err := t.customerByID(customerID)
	if err != nil {
		return nil, err
	}
	waiting, err := t.billsAwaitingPayment(c)
	if err != nil {
		return nil, err
	}
	if len(waiting) != 0 {
		return nil, fmt.Errorf("A bill is already awaiting payment for this customer")
	}
	if !billID.in(c.BillIDs) {
		return nil, fmt.Errorf("Bill %s not found for customer %s", billID, customerID)
	}
	b, err := t.billByID(billID)
	if err != nil {
		return nil, err
	}
	// Like tau2, this does not check the bill is unpaid: the policy tells
	// the agent to.
	b.Status = BillAwaitingPayment
	return "Payment request sent to the customer for bill " + b.BillID, nil
}

func (t *Tools) getDataUsage(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id")
	if err != nil {
		return nil, err
	}
	l, err := t.targetLine(v[0], v[1])
	if err != nil {
		return nil, err
	}
	p, err := t.planByID(strArg(l.PlanID))
	if err != nil {
		return nil, err
	}
	// The cycle ends the day before the first of next month; tau2 keeps
	// the year in December, so its "next month" is January of this year.
	td := today()
	next := dateOf(td.t.Year(), td.t.Month()+1, 1)
	if td.t.Month() == 12 {
		next = dateOf(td.t.Year(), 1, 1)
	}
	var d pyjson.Dict[any]
	d.Set("line_id", v[1].s)
	d.Set("data_used_gb", l.DataUsedGB)
	d.Set("data_limit_gb", p.DataLimitGB)
	d.Set("data_refueling_gb", l.DataRefuelingGB)
	d.Set("cycle_end_date", next.addDays(-1))
	return &d, nil
}

func (t *Tools) enableRoaming(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id")
	if err != nil {
		return nil, err
	}
	l, err := t.targetLine(v[0], v[1])
	if err != nil {
		return nil, err
	}
	if l.RoamingEnabled {
		return "Roaming was already enabled", nil
	}
	l.RoamingEnabled = true
	return "Roaming enabled successfully", nil
}

func (t *Tools) disableRoaming(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id")
	if err != nil {
		return nil, err
	}
	l, err := t.targetLine(v[0], v[1])
	if err != nil {
		return nil, err
	}
	if !l.RoamingEnabled {
		return "Roaming was already disabled", nil
	}
	l.RoamingEnabled = false
	return "Roaming disabled successfully", nil
}

func transferToHumanAgents(domain.Args) (any, error) { return "Transfer successful", nil }

func (t *Tools) refuelData(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id", "gb_amount")
	if err != nil {
		return nil, err
	}
	customerID, lineID, gb := v[0], v[1], v[2]
	l, err := t.targetLine(customerID, lineID)
	if err != nil {
		return nil, err
	}
	if !gb.numeric() {
		return nil, fmt.Errorf("'<=' not supported between instances of '%s' and 'int'", gb.kind.typeName())
	}
	if gb.num <= 0 {
		return nil, fmt.Errorf("Refuel amount must be positive")
	}
	p, err := t.planByID(strArg(l.PlanID))
	if err != nil {
		return nil, err
	}
	charge := gb.num * p.DataRefuelingPricePerGB
	l.DataRefuelingGB += gb.num
	desc := fmt.Sprintf("Data refueling: %s GB at $%s/GB", gb, pyjson.FloatRepr(p.DataRefuelingPricePerGB))
	if err := t.applyOneTimeCharge(customerID, charge, desc); err != nil {
		return nil, err
	}
	var d pyjson.Dict[any]
	d.Set("message", fmt.Sprintf("Successfully added %s GB of data for line %s for $%.2f", gb, lineID, charge))
	d.Set("new_data_refueling_gb", l.DataRefuelingGB)
	d.Set("charge", charge)
	return &d, nil
}

// applyOneTimeCharge adds a charge (or, negative, a credit) to the
// customer's draft bill, creating next month's draft if there is none.
func (t *Tools) applyOneTimeCharge(customerID argValue, amount float64, description string) error {
	c, err := t.customerByID(customerID)
	if err != nil {
		return err
	}
	var draft *Bill
	for _, id := range c.BillIDs {
		b, err := t.billByID(strArg(id))
		if err != nil {
			return err
		}
		if b.Status == BillDraft {
			draft = b
			break
		}
	}
	if draft == nil {
		next := today().firstOfMonth().addDays(32).firstOfMonth()
		end := dateOf(next.t.Year(), next.t.Month()+1, 1).addDays(-1)
		id := t.newBillID()
		t.db.Bills = append(t.db.Bills, Bill{
			BillID: id, CustomerID: customerID.s,
			PeriodStart: next, PeriodEnd: end, IssueDate: next,
			TotalDue: 0, DueDate: next.addDays(14), LineItems: []LineItem{}, Status: BillDraft,
		})
		c.BillIDs = append(c.BillIDs, id)
		draft = &t.db.Bills[len(t.db.Bills)-1]
	}
	kind := "Charge"
	if amount < 0 {
		kind = "Credit"
	}
	draft.LineItems = append(draft.LineItems, LineItem{Description: description, Amount: amount, Date: today(), ItemType: kind})
	draft.TotalDue += amount
	return nil
}
