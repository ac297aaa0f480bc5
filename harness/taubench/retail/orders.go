package retail

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pycalc"
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// The tools that change orders. Each checks in tau2's order and writes
// in tau2's order, so that a failure part way leaves the same partial
// writes (a refund to a gift card made before a later payment method is
// not found, say).

func (t *Tools) cancelPendingOrder(a domain.Args) (any, error) {
	v, err := args(a, "order_id", "reason")
	if err != nil {
		return nil, err
	}
	o, err := t.order(v[0])
	if err != nil {
		return nil, err
	}
	if o.Status != "pending" {
		return nil, errors.New("Non-pending order cannot be cancelled")
	}
	reason, ok, err := pyvalue.StrKey(v[1]) // `reason not in {...}`
	if err != nil {
		return nil, err
	}
	if !ok || (reason != "no longer needed" && reason != "ordered by mistake") {
		return nil, errors.New("Invalid reason")
	}
	var refunds []OrderPayment
	for _, p := range o.PaymentHistory {
		refunds = append(refunds, OrderPayment{TransactionType: "refund", Amount: p.Amount, PaymentMethodID: p.PaymentMethodID})
		u, err := t.user(o.UserID)
		if err != nil {
			return nil, err
		}
		pm, _, err := t.paymentMethod(u.UserID, p.PaymentMethodID)
		if err != nil {
			return nil, err
		}
		if gc, ok := pm.(*GiftCard); ok { // refunded at once
			gc.Balance = pycalc.Round(gc.Balance+p.Amount, 2)
		}
	}
	o.Status = "cancelled"
	o.CancelReason = &reason
	o.PaymentHistory = append(o.PaymentHistory, refunds...)
	return o, nil
}

// checkItems is the check the item tools share: each id of itemIDs must
// be in the order at least as many times as in the list. A non-string
// never is; msg formats the error from the id's str().
func checkItems(o *Order, itemIDs []any, msg func(id string) string) error {
	for _, e := range itemIDs {
		s, ok := e.(string)
		if !ok {
			return errors.New(msg(pyvalue.Str(e)))
		}
		have := 0
		for _, it := range o.Items {
			if it.ItemID == s {
				have++
			}
		}
		if countStr(itemIDs, s) > have {
			return errors.New(msg(s))
		}
	}
	return nil
}

// sameLength is the `len(item_ids) != len(new_item_ids)` check.
func sameLength(itemIDs, newItemIDs any, msg string) error {
	n, err := pyLen(itemIDs)
	if err != nil {
		return err
	}
	m, err := pyLen(newItemIDs)
	if err != nil {
		return err
	}
	if n != m {
		return errors.New(msg)
	}
	return nil
}

func (t *Tools) exchangeDeliveredOrderItems(a domain.Args) (any, error) {
	v, err := args(a, "order_id", "item_ids", "new_item_ids", "payment_method_id")
	if err != nil {
		return nil, err
	}
	o, err := t.order(v[0])
	if err != nil {
		return nil, err
	}
	if o.Status != "delivered" {
		return nil, errors.New("Non-delivered order cannot be exchanged")
	}
	items, err := iterList("item_ids", v[1])
	if err != nil {
		return nil, err
	}
	if err := checkItems(o, items, func(id string) string { return "Number of " + id + " not found." }); err != nil {
		return nil, err
	}
	if err := sameLength(v[1], v[2], "The number of items to be exchanged should match."); err != nil {
		return nil, err
	}
	newItems, err := iterList("new_item_ids", v[2])
	if err != nil {
		return nil, err
	}
	// diff_price starts as the int 0 and stays one when no item is
	// exchanged.
	var diff any = 0
	var sum float64
	for i := range min(len(items), len(newItems)) {
		id, _ := items[i].(string)
		it := firstItem(o, id)
		if it == nil {
			return nil, fmt.Errorf("Item %s not found", id)
		}
		nv, err := t.variant(it.ProductID, newItems[i])
		if err != nil {
			return nil, err
		}
		if !nv.Available {
			return nil, fmt.Errorf("New item %s not found or available", pyvalue.Str(newItems[i]))
		}
		sum += nv.Price - it.Price
		diff = sum
	}
	if f, ok := diff.(float64); ok {
		sum = pycalc.Round(f, 2)
		diff = sum
	}
	pm, pmID, err := t.paymentMethod(o.UserID, v[3])
	if err != nil {
		return nil, err
	}
	if gc, ok := pm.(*GiftCard); ok && gc.Balance < sum {
		return nil, errors.New("Insufficient gift card balance to pay for the price difference")
	}
	o.Status = "exchange requested"
	o.ExchangeItems = sortedStrings(items)
	o.ExchangeNewItems = sortedStrings(newItems)
	o.ExchangePaymentMethodID = &pmID
	o.ExchangePriceDifference = diff
	return o, nil
}

func (t *Tools) modifyPendingOrderAddress(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "order_id")
	if err != nil {
		return nil, err
	}
	o, err := t.order(v)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(o.Status, "pending") {
		return nil, errors.New("Non-pending order cannot be modified")
	}
	addr, err := newAddress(a)
	if err != nil {
		return nil, err
	}
	o.Address = addr
	return o, nil
}

func (t *Tools) modifyPendingOrderItems(a domain.Args) (any, error) {
	v, err := args(a, "order_id", "item_ids", "new_item_ids", "payment_method_id")
	if err != nil {
		return nil, err
	}
	o, err := t.order(v[0])
	if err != nil {
		return nil, err
	}
	if o.Status != "pending" { // strictly: an order is modified once
		return nil, errors.New("Non-pending order cannot be modified")
	}
	items, err := iterList("item_ids", v[1])
	if err != nil {
		return nil, err
	}
	if err := checkItems(o, items, func(id string) string { return id + " not found" }); err != nil {
		return nil, err
	}
	if err := sameLength(v[1], v[2], "The number of items to be exchanged should match"); err != nil {
		return nil, err
	}
	newItems, err := iterList("new_item_ids", v[2])
	if err != nil {
		return nil, err
	}
	n := min(len(items), len(newItems))
	var diff float64
	var nv *Variant
	for i := range n {
		id, _ := items[i].(string)
		if s, ok := newItems[i].(string); ok && s == id {
			return nil, errors.New("The new item id should be different from the old item id")
		}
		it := firstItem(o, id)
		if it == nil {
			return nil, fmt.Errorf("Item %s not found", id)
		}
		if nv, err = t.variant(it.ProductID, newItems[i]); err != nil {
			return nil, err
		}
		if !nv.Available {
			return nil, fmt.Errorf("New item %s not found or available", pyvalue.Str(newItems[i]))
		}
		diff += nv.Price - it.Price
	}
	pm, pmID, err := t.paymentMethod(o.UserID, v[3])
	if err != nil {
		return nil, err
	}
	gc, isGift := pm.(*GiftCard)
	if isGift && gc.Balance < diff {
		return nil, errors.New("Insufficient gift card balance to pay for the new item")
	}
	kind := "refund"
	if diff > 0 {
		kind = "payment"
	}
	o.PaymentHistory = append(o.PaymentHistory, OrderPayment{TransactionType: kind, Amount: math.Abs(diff), PaymentMethodID: pmID})
	if isGift {
		gc.Balance = pycalc.Round(gc.Balance-diff, 2)
	}
	for i := range n {
		id, _ := items[i].(string)
		it := firstItem(o, id)
		if it == nil {
			return nil, fmt.Errorf("Item %s not found", id)
		}
		// tau2 gives every modified item the price and options of the
		// last new item (its loop variable), not of its own: kept, as
		// the gold database hashes depend on it.
		it.ItemID, _ = newItems[i].(string)
		it.Price = nv.Price
		it.Options = cloneOptions(nv)
	}
	o.Status = "pending (item modified)"
	return o, nil
}

func cloneOptions(v *Variant) *pyjson.Dict[string] {
	out := &pyjson.Dict[string]{}
	for _, k := range v.Options.Keys() {
		x, _ := v.Options.Get(k)
		out.Set(k, x)
	}
	return out
}

func (t *Tools) modifyPendingOrderPayment(a domain.Args) (any, error) {
	v, err := args(a, "order_id", "payment_method_id")
	if err != nil {
		return nil, err
	}
	o, err := t.order(v[0])
	if err != nil {
		return nil, err
	}
	if !strings.Contains(o.Status, "pending") {
		return nil, errors.New("Non-pending order cannot be modified")
	}
	pm, pmID, err := t.paymentMethod(o.UserID, v[1])
	if err != nil {
		return nil, err
	}
	if len(o.PaymentHistory) != 1 || o.PaymentHistory[0].TransactionType != "payment" {
		return nil, errors.New("There should be exactly one payment for a pending order")
	}
	first := o.PaymentHistory[0]
	if first.PaymentMethodID == pmID {
		return nil, errors.New("The new payment method should be different from the current one")
	}
	amount := first.Amount
	gc, isGift := pm.(*GiftCard)
	if isGift && gc.Balance < amount {
		return nil, errors.New("Insufficient gift card balance to pay for the order")
	}
	o.PaymentHistory = append(o.PaymentHistory,
		OrderPayment{TransactionType: "payment", Amount: amount, PaymentMethodID: pmID},
		OrderPayment{TransactionType: "refund", Amount: amount, PaymentMethodID: first.PaymentMethodID})
	if isGift {
		gc.Balance = pycalc.Round(gc.Balance-amount, 2)
	}
	old, _, err := t.paymentMethod(o.UserID, first.PaymentMethodID)
	if err != nil {
		return nil, err
	}
	if gc, ok := old.(*GiftCard); ok {
		gc.Balance = pycalc.Round(gc.Balance+amount, 2)
	}
	return o, nil
}

func (t *Tools) returnDeliveredOrderItems(a domain.Args) (any, error) {
	v, err := args(a, "order_id", "item_ids", "payment_method_id")
	if err != nil {
		return nil, err
	}
	o, err := t.order(v[0])
	if err != nil {
		return nil, err
	}
	if o.Status != "delivered" {
		return nil, errors.New("Non-delivered order cannot be returned")
	}
	u, err := t.user(o.UserID)
	if err != nil {
		return nil, err
	}
	pm, pmID, err := t.paymentMethod(u.UserID, v[2])
	if err != nil {
		return nil, err
	}
	if _, isGift := pm.(*GiftCard); !isGift {
		if len(o.PaymentHistory) == 0 {
			return nil, errors.New("list index out of range")
		}
		if pmID != o.PaymentHistory[0].PaymentMethodID {
			return nil, errors.New("Payment method should be the original payment method")
		}
	}
	items, err := iterList("item_ids", v[1])
	if err != nil {
		return nil, err
	}
	if err := checkItems(o, items, func(string) string { return "Some item not found" }); err != nil {
		return nil, err
	}
	o.Status = "return requested"
	o.ReturnItems = sortedStrings(items)
	o.ReturnPaymentMethodID = &pmID
	return o, nil
}
