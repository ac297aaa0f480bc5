package telecom

import (
	"fmt"
	"math"

	"evals.si/harness/taubench/domain"
)

// The assistant-side functions that are not tools: tasks' initialization
// actions set the scene with them (a data overage, an overdue bill) and
// their env_assertions check the outcome.

func (t *Tools) getAvailablePlanIDs(domain.Args) (any, error) {
	ids := []string{}
	for _, p := range t.db.Plans {
		ids = append(ids, p.PlanID)
	}
	return ids, nil
}

func (t *Tools) setDataUsage(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id", "data_used_gb")
	if err != nil {
		return nil, err
	}
	lineID, used := v[1], v[2]
	l, err := t.targetLine(v[0], lineID)
	if err != nil {
		return nil, err
	}
	// tau2 assigns the value unvalidated; a number is what every task
	// passes. An integer is stored as a float here, where tau2 would keep
	// the int (and dump "3" rather than "3.0").
	if !used.numeric() {
		return nil, fmt.Errorf("set_data_usage: data_used_gb %s is not a number", used)
	}
	l.DataUsedGB = used.num
	return fmt.Sprintf("Data usage set to %s GB for line %s", used, lineID), nil
}

// suspendLineForOverdueBill puts the scene of an unpaid bill in place:
// last month's overdue bill for the line's plan, and the line suspended.
func (t *Tools) suspendLineForOverdueBill(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id", "new_bill_id", "contract_ended")
	if err != nil {
		return nil, err
	}
	customerID, lineID, billID, contractEnded := v[0], v[1], v[2], v[3]
	l, err := t.lineByID(lineID)
	if err != nil {
		return nil, err
	}
	if l.Status != LineActive {
		return nil, fmt.Errorf("Line must be active to suspend for unpaid bill")
	}
	p, err := t.planByID(strArg(l.PlanID))
	if err != nil {
		return nil, err
	}
	amount := p.PricePerMonth
	if amount <= 0 {
		return nil, fmt.Errorf("Amount must be positive for overdue bill")
	}
	c, err := t.customerByID(customerID)
	if err != nil {
		return nil, err
	}
	for _, id := range c.BillIDs {
		b, err := t.billByID(strArg(id))
		if err != nil {
			return nil, err
		}
		if b.Status == BillOverdue {
			return nil, fmt.Errorf("Customer already has an overdue bill")
		}
	}
	if billID.kind != kindStr {
		// pydantic refuses it as Bill.bill_id.
		return nil, fmt.Errorf("suspend_line_for_overdue_bill: new_bill_id %s is not a string", billID)
	}
	lastMonthEnd := today().firstOfMonth().addDays(-1)
	lastMonthStart := lastMonthEnd.firstOfMonth()
	kind := "Charge"
	if amount <= 0 {
		kind = "Credit"
	}
	t.db.Bills = append(t.db.Bills, Bill{
		BillID: billID.s, CustomerID: c.CustomerID,
		PeriodStart: lastMonthStart, PeriodEnd: lastMonthEnd, IssueDate: lastMonthStart,
		TotalDue: 0 + amount, DueDate: lastMonthStart.addDays(14), Status: BillOverdue,
		LineItems: []LineItem{{Description: "Charge for line " + l.LineID, Amount: amount, Date: today(), ItemType: kind}},
	})
	c.BillIDs = append(c.BillIDs, billID.s)
	l.Status = LineSuspended
	d := today()
	l.SuspensionStartDate = &d
	if contractEnded.truthy() {
		end := lastMonthEnd
		l.ContractEndDate = &end
	}
	return fmt.Sprintf("Line %s suspended for unpaid bill %s. Contract ended: %s", lineID, billID, contractEnded), nil
}

func (t *Tools) assertDataRefuelingAmount(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id", "expected_amount")
	if err != nil {
		return nil, err
	}
	l, err := t.targetLine(v[0], v[1])
	if err != nil {
		return nil, err
	}
	want := v[2]
	if !want.numeric() {
		return nil, fmt.Errorf("unsupported operand type(s) for -: 'float' and '%s'", want.kind.typeName())
	}
	return math.Abs(l.DataRefuelingGB-want.num) < 1e-6, nil
}

func (t *Tools) assertLineStatus(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "line_id", "expected_status")
	if err != nil {
		return nil, err
	}
	l, err := t.targetLine(v[0], v[1])
	if err != nil {
		return nil, err
	}
	return v[2].is(string(l.Status)), nil
}

func (t *Tools) assertOverdueBillExists(a domain.Args) (any, error) {
	v, err := argsOf(a, "customer_id", "overdue_bill_id")
	if err != nil {
		return nil, err
	}
	billID := v[1]
	c, err := t.customerByID(v[0])
	if err != nil {
		return nil, err
	}
	if !billID.in(c.BillIDs) {
		return nil, fmt.Errorf("Overdue bill %s not found", billID)
	}
	b, err := t.billByID(billID)
	if err != nil {
		return nil, err
	}
	if b.Status != BillOverdue {
		return nil, fmt.Errorf("Overdue bill %s is not overdue", billID)
	}
	return true, nil
}

// assertNoOverdueBill holds when the bill is gone or paid.
func (t *Tools) assertNoOverdueBill(a domain.Args) (any, error) {
	v, err := argsOf(a, "overdue_bill_id")
	if err != nil {
		return nil, err
	}
	b, err := t.billByID(v[0])
	if err != nil {
		return true, nil
	}
	return b.Status == BillPaid, nil
}
