package retail

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pycalc"
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// toolsJSON is tau2's description of the retail tools, recorded by
// scripts/tau2-reference/generate.py.
//
//go:embed tools.json
var toolsJSON []byte

// Tools is tau2's RetailTools: the agent's tools over one RetailDB.
type Tools struct {
	db      *RetailDB
	schemas []domain.Schema
}

var _ domain.Toolkit = (*Tools)(nil)

// Class is the Python class name, for TypeError texts.
func (t *Tools) Class() string { return "RetailTools" }

// Tools are the tools as tau2 offers them to the model.
func (t *Tools) Tools() []domain.Schema { return t.schemas }

// DB is the database, for hashing.
func (t *Tools) DB() any { return t.db }

// UpdateDB is tau2's update_db.
func (t *Tools) UpdateDB(patch json.RawMessage) error {
	if err := domain.Merge(t.db, patch); err != nil {
		return err
	}
	return checkDB(t.db)
}

// Funcs lists the tools in tau2's order (retail has no set-up or
// assertion functions).
func (t *Tools) Funcs() []domain.Func {
	tool := func(name string, typ domain.ToolType, run func(domain.Args) (any, error), params ...string) domain.Func {
		f := domain.Func{Name: name, Tool: true, Type: typ, Mutates: typ == domain.Write, Run: run}
		for _, p := range params {
			f.Params = append(f.Params, domain.Param{Name: p})
		}
		return f
	}
	address := []string{"address1", "address2", "city", "state", "country", "zip"}
	return []domain.Func{
		tool("calculate", domain.Generic, t.calculate, "expression"),
		tool("cancel_pending_order", domain.Write, t.cancelPendingOrder, "order_id", "reason"),
		tool("exchange_delivered_order_items", domain.Write, t.exchangeDeliveredOrderItems,
			"order_id", "item_ids", "new_item_ids", "payment_method_id"),
		tool("find_user_id_by_name_zip", domain.Read, t.findUserIDByNameZip, "first_name", "last_name", "zip"),
		tool("find_user_id_by_email", domain.Read, t.findUserIDByEmail, "email"),
		tool("get_order_details", domain.Read, t.getOrderDetails, "order_id"),
		tool("get_product_details", domain.Read, t.getProductDetails, "product_id"),
		tool("get_item_details", domain.Read, t.getItemDetails, "item_id"),
		tool("get_user_details", domain.Read, t.getUserDetails, "user_id"),
		tool("list_all_product_types", domain.Read, t.listAllProductTypes),
		tool("modify_pending_order_address", domain.Write, t.modifyPendingOrderAddress,
			append([]string{"order_id"}, address...)...),
		tool("modify_pending_order_items", domain.Write, t.modifyPendingOrderItems,
			"order_id", "item_ids", "new_item_ids", "payment_method_id"),
		tool("modify_pending_order_payment", domain.Write, t.modifyPendingOrderPayment, "order_id", "payment_method_id"),
		tool("modify_user_address", domain.Write, t.modifyUserAddress, append([]string{"user_id"}, address...)...),
		tool("return_delivered_order_items", domain.Write, t.returnDeliveredOrderItems,
			"order_id", "item_ids", "payment_method_id"),
		tool("transfer_to_human_agents", domain.Generic, t.transferToHumanAgents, "summary"),
	}
}

// args decodes the named arguments, in order.
func args(a domain.Args, names ...string) ([]any, error) {
	out := make([]any, len(names))
	for i, n := range names {
		v, err := pyvalue.Arg(a, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// The lookups: tau2's _get_order, _get_user, _get_product, _get_item,
// _get_variant and _get_payment_method, with an id as the call gave it.

func (t *Tools) order(id any) (*Order, error) {
	k, ok, err := pyvalue.StrKey(id)
	if err != nil {
		return nil, err
	}
	o, found := t.db.Orders.Get(k)
	if !ok || !found {
		return nil, errors.New("Order not found")
	}
	return o, nil
}

func (t *Tools) user(id any) (*User, error) {
	k, ok, err := pyvalue.StrKey(id)
	if err != nil {
		return nil, err
	}
	u, found := t.db.Users.Get(k)
	if !ok || !found {
		return nil, errors.New("User not found")
	}
	return u, nil
}

func (t *Tools) product(id any) (*Product, error) {
	k, ok, err := pyvalue.StrKey(id)
	if err != nil {
		return nil, err
	}
	p, found := t.db.Products.Get(k)
	if !ok || !found {
		return nil, errors.New("Product not found")
	}
	return p, nil
}

func (t *Tools) item(id any) (*Variant, error) {
	k, ok, err := pyvalue.StrKey(id)
	for _, p := range t.db.Products.Values() {
		if err != nil {
			return nil, err // raised by the first `in`
		}
		if v, found := p.Variants.Get(k); ok && found {
			return v, nil
		}
	}
	return nil, errors.New("Item not found")
}

func (t *Tools) variant(productID string, id any) (*Variant, error) {
	p, err := t.product(productID)
	if err != nil {
		return nil, err
	}
	k, ok, err := pyvalue.StrKey(id)
	if err != nil {
		return nil, err
	}
	v, found := p.Variants.Get(k)
	if !ok || !found {
		return nil, errors.New("Variant not found")
	}
	return v, nil
}

func (t *Tools) paymentMethod(userID string, id any) (PaymentMethod, string, error) {
	u, err := t.user(userID)
	if err != nil {
		return nil, "", err
	}
	k, ok, err := pyvalue.StrKey(id)
	if err != nil {
		return nil, "", err
	}
	pm, found := u.PaymentMethods.Get(k)
	if !ok || !found {
		return nil, "", errors.New("Payment method not found")
	}
	return pm, k, nil
}

// firstItem is the first item of o with the given item id.
func firstItem(o *Order, itemID string) *OrderItem {
	for _, it := range o.Items {
		if it.ItemID == itemID {
			return it
		}
	}
	return nil
}

func (t *Tools) calculate(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "expression")
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case string:
		return pycalc.Calculate(x)
	case []any, *pyjson.Dict[any]:
		// Iterated element by element (a dict by its keys), each tested
		// with `in` against the allowed characters; eval then refuses
		// anything but a string.
		var elems []any
		if l, ok := x.([]any); ok {
			elems = l
		} else {
			for _, k := range x.(*pyjson.Dict[any]).Keys() {
				elems = append(elems, k)
			}
		}
		for _, e := range elems {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("'in <string>' requires string as left operand, not %s", pyvalue.Type(e))
			}
			if !strings.Contains("0123456789+-*/(). ", s) {
				return nil, errors.New("Invalid characters in expression")
			}
		}
		return nil, errors.New("eval() arg 1 must be a string, bytes or code object")
	}
	return nil, fmt.Errorf("'%s' object is not iterable", pyvalue.Type(v))
}

func (t *Tools) findUserIDByNameZip(a domain.Args) (any, error) {
	v, err := args(a, "first_name", "last_name", "zip")
	if err != nil {
		return nil, err
	}
	for _, id := range t.db.Users.Keys() {
		u, _ := t.db.Users.Get(id)
		first, err := lower(v[0])
		if err != nil {
			return nil, err
		}
		if strings.ToLower(u.Name.FirstName) != first {
			continue
		}
		last, err := lower(v[1])
		if err != nil {
			return nil, err
		}
		if strings.ToLower(u.Name.LastName) != last {
			continue
		}
		if zip, ok := v[2].(string); ok && u.Address.Zip == zip {
			return id, nil
		}
	}
	return nil, errors.New("User not found")
}

func (t *Tools) findUserIDByEmail(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "email")
	if err != nil {
		return nil, err
	}
	for _, id := range t.db.Users.Keys() {
		u, _ := t.db.Users.Get(id)
		email, err := lower(v)
		if err != nil {
			return nil, err
		}
		if strings.ToLower(u.Email) == email {
			return id, nil
		}
	}
	return nil, errors.New("User not found")
}

// lower is v.lower().
func lower(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("'%s' object has no attribute 'lower'", pyvalue.Type(v))
	}
	return strings.ToLower(s), nil
}

func (t *Tools) getOrderDetails(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "order_id")
	if err != nil {
		return nil, err
	}
	return t.order(v)
}

func (t *Tools) getProductDetails(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "product_id")
	if err != nil {
		return nil, err
	}
	return t.product(v)
}

func (t *Tools) getItemDetails(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "item_id")
	if err != nil {
		return nil, err
	}
	return t.item(v)
}

func (t *Tools) getUserDetails(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "user_id")
	if err != nil {
		return nil, err
	}
	return t.user(v)
}

func (t *Tools) listAllProductTypes(domain.Args) (any, error) {
	names := map[string]string{}
	for _, p := range t.db.Products.Values() {
		names[p.Name] = p.ProductID
	}
	return pyjson.DumpsSorted(names)
}

func (t *Tools) transferToHumanAgents(domain.Args) (any, error) {
	return "Transfer successful", nil
}

// newAddress is UserAddress(address1=..., zip=...) from the arguments,
// validated as pydantic does (every field a string), errors in the
// model's field order.
func newAddress(a domain.Args) (UserAddress, error) {
	var addr UserAddress
	fields := []struct {
		name string
		dst  *string
	}{
		{"address1", &addr.Address1}, {"address2", &addr.Address2}, {"city", &addr.City},
		{"country", &addr.Country}, {"state", &addr.State}, {"zip", &addr.Zip},
	}
	ve := pyvalue.ValidationError{Model: "UserAddress"}
	for _, f := range fields {
		v, err := pyvalue.Arg(a, f.name)
		if err != nil {
			return addr, err
		}
		// A str field is strict here: only a string validates.
		s, ok := v.(string)
		if !ok {
			ve.Add(f.name, "string_type", "Input should be a valid string", v)
			continue
		}
		*f.dst = s
	}
	if err := ve.Err(); err != nil {
		return addr, err
	}
	return addr, nil
}

func (t *Tools) modifyUserAddress(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "user_id")
	if err != nil {
		return nil, err
	}
	u, err := t.user(v)
	if err != nil {
		return nil, err
	}
	addr, err := newAddress(a)
	if err != nil {
		return nil, err
	}
	u.Address = addr
	return u, nil
}

// sortedStrings is sorted(list) for a list whose elements are known to
// be strings.
func sortedStrings(list []any) *[]string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i], _ = e.(string)
	}
	sort.Strings(out)
	return &out
}
