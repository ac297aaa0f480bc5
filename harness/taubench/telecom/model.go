package telecom

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"evals.si/harness/taubench/domain"
)

// The carrier's database, as tau2's telecom data_model.py declares it.
// Fields are in pydantic's declaration order (model_dump keeps it) and
// every model decodes strictly: unknown fields are refused, required
// fields must be present, and a missing defaulted field takes pydantic's
// default. Lists are never nil once decoded, so that the JSON update_db
// round-trips through has [] where pydantic has [], not null.

// Address is a customer's billing address.
type Address struct {
	Street  string `json:"street"`
	City    string `json:"city"`
	State   string `json:"state"`
	ZipCode string `json:"zip_code"`
}

// Plan is a service plan.
type Plan struct {
	PlanID                  string  `json:"plan_id"`
	Name                    string  `json:"name"`
	DataLimitGB             float64 `json:"data_limit_gb"`
	PricePerMonth           float64 `json:"price_per_month"`
	DataRefuelingPricePerGB float64 `json:"data_refueling_price_per_gb"`
}

// DeviceType is what kind of device a Device is.
type DeviceType string

// The device types.
const (
	DevicePhone  DeviceType = "phone"
	DeviceRouter DeviceType = "router"
	DeviceTablet DeviceType = "tablet"
	DeviceWatch  DeviceType = "watch"
	DeviceOther  DeviceType = "other"
)

// Device is a device known to the carrier.
type Device struct {
	DeviceID             string     `json:"device_id"`
	DeviceType           DeviceType `json:"device_type"`
	Model                string     `json:"model"`
	IMEI                 *string    `json:"imei"`
	IsESIMCapable        bool       `json:"is_esim_capable"`
	Activated            bool       `json:"activated"`
	ActivationDate       *DateTime  `json:"activation_date"`
	LastESIMTransferDate *DateTime  `json:"last_esim_transfer_date"`
}

// LineStatus is a line's state.
type LineStatus string

// The line statuses.
const (
	LineActive            LineStatus = "Active"
	LineSuspended         LineStatus = "Suspended"
	LinePendingActivation LineStatus = "Pending Activation"
	LineClosed            LineStatus = "Closed"
)

// Line is a phone or data line.
type Line struct {
	LineID                 string     `json:"line_id"`
	PhoneNumber            string     `json:"phone_number"`
	Status                 LineStatus `json:"status"`
	PlanID                 string     `json:"plan_id"`
	DeviceID               *string    `json:"device_id"`
	DataUsedGB             float64    `json:"data_used_gb"`
	DataRefuelingGB        float64    `json:"data_refueling_gb"`
	RoamingEnabled         bool       `json:"roaming_enabled"`
	ContractEndDate        *Date      `json:"contract_end_date"`
	LastPlanChangeDate     *Date      `json:"last_plan_change_date"`
	LastSIMReplacementDate *Date      `json:"last_sim_replacement_date"`
	SuspensionStartDate    *Date      `json:"suspension_start_date"`
}

// LineItem is one charge, credit or payment on a bill.
type LineItem struct {
	Description string  `json:"description"`
	Amount      float64 `json:"amount"`
	Date        Date    `json:"date"`
	ItemType    string  `json:"item_type"`
}

// BillStatus is a bill's state.
type BillStatus string

// The bill statuses.
const (
	BillDraft           BillStatus = "Draft"
	BillIssued          BillStatus = "Issued"
	BillAwaitingPayment BillStatus = "Awaiting Payment"
	BillPaid            BillStatus = "Paid"
	BillOverdue         BillStatus = "Overdue"
	BillDisputed        BillStatus = "Disputed"
)

// Bill is one bill of a customer.
type Bill struct {
	BillID      string     `json:"bill_id"`
	CustomerID  string     `json:"customer_id"`
	PeriodStart Date       `json:"period_start"`
	PeriodEnd   Date       `json:"period_end"`
	IssueDate   Date       `json:"issue_date"`
	TotalDue    float64    `json:"total_due"`
	DueDate     Date       `json:"due_date"`
	LineItems   []LineItem `json:"line_items"`
	Status      BillStatus `json:"status"`
}

// AccountStatus is a customer account's state.
type AccountStatus string

// The account statuses.
const (
	AccountActive              AccountStatus = "Active"
	AccountSuspended           AccountStatus = "Suspended"
	AccountPendingVerification AccountStatus = "Pending Verification"
	AccountClosed              AccountStatus = "Closed"
)

// PaymentMethodType is the kind of a stored payment method.
type PaymentMethodType string

// The payment method types.
const (
	PaymentCreditCard PaymentMethodType = "Credit Card"
	PaymentDebitCard  PaymentMethodType = "Debit Card"
	PaymentPayPal     PaymentMethodType = "PayPal"
)

// PaymentMethod is a stored payment method.
type PaymentMethod struct {
	MethodType         PaymentMethodType `json:"method_type"`
	AccountNumberLast4 string            `json:"account_number_last_4"`
	ExpirationDate     string            `json:"expiration_date"`
}

// Customer is a carrier customer.
type Customer struct {
	CustomerID                 string          `json:"customer_id"`
	FullName                   string          `json:"full_name"`
	DateOfBirth                string          `json:"date_of_birth"`
	Email                      string          `json:"email"`
	PhoneNumber                string          `json:"phone_number"`
	Address                    Address         `json:"address"`
	AccountStatus              AccountStatus   `json:"account_status"`
	PaymentMethods             []PaymentMethod `json:"payment_methods"`
	LineIDs                    []string        `json:"line_ids"`
	BillIDs                    []string        `json:"bill_ids"`
	CreatedAt                  DateTime        `json:"created_at"`
	LastExtensionDate          *Date           `json:"last_extension_date"`
	GoodwillCreditUsedThisYear float64         `json:"goodwill_credit_used_this_year"`
}

// TelecomDB is the carrier's database.
type TelecomDB struct {
	Plans     []Plan     `json:"plans"`
	Customers []Customer `json:"customers"`
	Lines     []Line     `json:"lines"`
	Bills     []Bill     `json:"bills"`
	Devices   []Device   `json:"devices"`
}

// decodeModel decodes one model strictly into v (a pointer to an alias
// type with no methods, holding the defaults), as pydantic validates: the
// required fields must be there, and only Optional fields (pointers) may
// be null.
func decodeModel(data []byte, model string, v any, required ...string) error {
	if string(data) == "null" {
		return fmt.Errorf("%s: want an object, got null", model)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return fmt.Errorf("%s: want an object: %w", model, err)
	}
	for _, f := range required {
		if _, ok := fields[f]; !ok {
			return fmt.Errorf("%s: field %s is required", model, f)
		}
	}
	t := reflect.TypeOf(v).Elem()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if raw, ok := fields[name]; ok && string(raw) == "null" && f.Type.Kind() != reflect.Pointer {
			return fmt.Errorf("%s: field %s may not be null", model, name)
		}
	}
	if err := domain.DecodeStrict(data, v); err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	return nil
}

// UnmarshalJSON decodes an Address strictly.
func (a *Address) UnmarshalJSON(data []byte) error {
	type plain Address
	var p plain
	if err := decodeModel(data, "Address", &p, "street", "city", "state", "zip_code"); err != nil {
		return err
	}
	*a = Address(p)
	return nil
}

// UnmarshalJSON decodes a Plan strictly.
func (pl *Plan) UnmarshalJSON(data []byte) error {
	type plain Plan
	var p plain
	if err := decodeModel(data, "Plan", &p, "plan_id", "name", "data_limit_gb", "price_per_month", "data_refueling_price_per_gb"); err != nil {
		return err
	}
	*pl = Plan(p)
	return nil
}

// UnmarshalJSON decodes a Device strictly.
func (d *Device) UnmarshalJSON(data []byte) error {
	type plain Device
	var p plain
	if err := decodeModel(data, "Device", &p, "device_id", "device_type", "model", "is_esim_capable"); err != nil {
		return err
	}
	if err := checkEnum("Device.device_type", p.DeviceType, DevicePhone, DeviceRouter, DeviceTablet, DeviceWatch, DeviceOther); err != nil {
		return err
	}
	*d = Device(p)
	return nil
}

// UnmarshalJSON decodes a Line strictly.
func (l *Line) UnmarshalJSON(data []byte) error {
	type plain Line
	p := plain{Status: LinePendingActivation}
	if err := decodeModel(data, "Line", &p, "line_id", "phone_number", "plan_id"); err != nil {
		return err
	}
	if err := checkEnum("Line.status", p.Status, LineActive, LineSuspended, LinePendingActivation, LineClosed); err != nil {
		return err
	}
	*l = Line(p)
	return nil
}

// UnmarshalJSON decodes a LineItem strictly.
func (li *LineItem) UnmarshalJSON(data []byte) error {
	type plain LineItem
	var p plain
	if err := decodeModel(data, "LineItem", &p, "description", "amount", "date", "item_type"); err != nil {
		return err
	}
	*li = LineItem(p)
	return nil
}

// UnmarshalJSON decodes a Bill strictly.
func (b *Bill) UnmarshalJSON(data []byte) error {
	type plain Bill
	p := plain{Status: BillDraft, LineItems: []LineItem{}}
	if err := decodeModel(data, "Bill", &p, "bill_id", "customer_id", "period_start", "period_end", "issue_date", "total_due", "due_date"); err != nil {
		return err
	}
	if err := checkEnum("Bill.status", p.Status, BillDraft, BillIssued, BillAwaitingPayment, BillPaid, BillOverdue, BillDisputed); err != nil {
		return err
	}
	*b = Bill(p)
	return nil
}

// UnmarshalJSON decodes a PaymentMethod strictly.
func (pm *PaymentMethod) UnmarshalJSON(data []byte) error {
	type plain PaymentMethod
	var p plain
	if err := decodeModel(data, "PaymentMethod", &p, "method_type", "account_number_last_4", "expiration_date"); err != nil {
		return err
	}
	if err := checkEnum("PaymentMethod.method_type", p.MethodType, PaymentCreditCard, PaymentDebitCard, PaymentPayPal); err != nil {
		return err
	}
	*pm = PaymentMethod(p)
	return nil
}

// UnmarshalJSON decodes a Customer strictly.
func (c *Customer) UnmarshalJSON(data []byte) error {
	type plain Customer
	p := plain{AccountStatus: AccountPendingVerification, CreatedAt: defaultCreatedAt(),
		PaymentMethods: []PaymentMethod{}, LineIDs: []string{}, BillIDs: []string{}}
	if err := decodeModel(data, "Customer", &p, "customer_id", "full_name", "date_of_birth", "email", "phone_number", "address"); err != nil {
		return err
	}
	if err := checkEnum("Customer.account_status", p.AccountStatus, AccountActive, AccountSuspended, AccountPendingVerification, AccountClosed); err != nil {
		return err
	}
	*c = Customer(p)
	return nil
}

// UnmarshalJSON decodes a TelecomDB strictly.
func (db *TelecomDB) UnmarshalJSON(data []byte) error {
	type plain TelecomDB
	p := plain{Plans: []Plan{}, Customers: []Customer{}, Lines: []Line{}, Bills: []Bill{}, Devices: []Device{}}
	if err := decodeModel(data, "TelecomDB", &p); err != nil {
		return err
	}
	*db = TelecomDB(p)
	return nil
}

func checkEnum[E ~string](field string, v E, allowed ...E) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("%s: %q is not one of %q", field, v, allowed)
}
