package retail

import (
	"bytes"
	"encoding/json"
	"fmt"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
)

// RetailDB is tau2's retail database: products, users and orders, each a
// dict by id in the order db.json lists them.
type RetailDB struct {
	Products *pyjson.Dict[*Product] `json:"products"`
	Users    *pyjson.Dict[*User]    `json:"users"`
	Orders   *pyjson.Dict[*Order]   `json:"orders"`
}

// Product is a product type and its variants (items) by item id.
type Product struct {
	Name      string                 `json:"name"`
	ProductID string                 `json:"product_id"`
	Variants  *pyjson.Dict[*Variant] `json:"variants"`
}

// Variant is one item of a product: its options, stock and price.
type Variant struct {
	ItemID    string               `json:"item_id"`
	Options   *pyjson.Dict[string] `json:"options"`
	Available bool                 `json:"available"`
	Price     float64              `json:"price"`
}

// UserName is a user's full name.
type UserName struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
}

// UserAddress is a postal address (a user's default one, or an order's).
type UserAddress struct {
	Address1 string `json:"address1"`
	Address2 string `json:"address2"`
	City     string `json:"city"`
	Country  string `json:"country"`
	State    string `json:"state"`
	Zip      string `json:"zip"`
}

// User is a customer: profile, payment methods by id, and order ids.
type User struct {
	UserID         string                      `json:"user_id"`
	Name           UserName                    `json:"name"`
	Address        UserAddress                 `json:"address"`
	Email          string                      `json:"email"`
	PaymentMethods *pyjson.Dict[PaymentMethod] `json:"payment_methods"`
	Orders         []string                    `json:"orders"`
}

// PaymentMethod is tau2's Union[CreditCard, GiftCard, Paypal]: which one
// a stored method is follows from its "source".
type PaymentMethod interface {
	paymentSource() string
}

// CreditCard is a card payment method.
type CreditCard struct {
	Source   string `json:"source"`
	ID       string `json:"id"`
	Brand    string `json:"brand"`
	LastFour string `json:"last_four"`
}

// GiftCard is a gift card with a balance, which refunds and payments
// change at once.
type GiftCard struct {
	Source  string  `json:"source"`
	ID      string  `json:"id"`
	Balance float64 `json:"balance"`
}

// Paypal is a PayPal account.
type Paypal struct {
	Source string `json:"source"`
	ID     string `json:"id"`
}

func (*CreditCard) paymentSource() string { return "credit_card" }
func (*GiftCard) paymentSource() string   { return "gift_card" }
func (*Paypal) paymentSource() string     { return "paypal" }

// UnmarshalJSON reads a user, each payment method as the type its source
// names (an interface-valued Dict cannot decode itself).
func (u *User) UnmarshalJSON(data []byte) error {
	var raw struct {
		UserID         string                        `json:"user_id"`
		Name           UserName                      `json:"name"`
		Address        UserAddress                   `json:"address"`
		Email          string                        `json:"email"`
		PaymentMethods *pyjson.Dict[json.RawMessage] `json:"payment_methods"`
		Orders         []string                      `json:"orders"`
	}
	if err := domain.DecodeStrict(data, &raw); err != nil {
		return err
	}
	*u = User{UserID: raw.UserID, Name: raw.Name, Address: raw.Address, Email: raw.Email, Orders: raw.Orders}
	if raw.PaymentMethods == nil {
		return fmt.Errorf("user %s: payment_methods is missing or null", raw.UserID)
	}
	u.PaymentMethods = &pyjson.Dict[PaymentMethod]{}
	for _, id := range raw.PaymentMethods.Keys() {
		b, _ := raw.PaymentMethods.Get(id)
		pm, err := decodePaymentMethod(b)
		if err != nil {
			return fmt.Errorf("user %s: payment method %s: %w", raw.UserID, id, err)
		}
		u.PaymentMethods.Set(id, pm)
	}
	return nil
}

func decodePaymentMethod(b []byte) (PaymentMethod, error) {
	var probe struct {
		Source string `json:"source"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, err
	}
	var pm PaymentMethod
	switch probe.Source {
	case "credit_card":
		pm = &CreditCard{}
	case "gift_card":
		pm = &GiftCard{}
	case "paypal":
		pm = &Paypal{}
	default:
		return nil, fmt.Errorf("source %q is none of credit_card, gift_card, paypal", probe.Source)
	}
	if err := domain.DecodeStrict(bytes.TrimSpace(b), pm); err != nil {
		return nil, err
	}
	return pm, nil
}

// OrderFulfillment is one shipment of an order's items (tau2 spells the
// class OrderFullfilment).
type OrderFulfillment struct {
	TrackingID []string `json:"tracking_id"`
	ItemIDs    []string `json:"item_ids"`
}

// OrderItem is one item of an order, at the price it was bought for.
type OrderItem struct {
	Name      string               `json:"name"`
	ProductID string               `json:"product_id"`
	ItemID    string               `json:"item_id"`
	Price     float64              `json:"price"`
	Options   *pyjson.Dict[string] `json:"options"`
}

// OrderPayment is a payment or refund of an order.
type OrderPayment struct {
	TransactionType string  `json:"transaction_type"` // "payment" or "refund"
	Amount          float64 `json:"amount"`
	PaymentMethodID string  `json:"payment_method_id"`
}

// Order is an order: its items, status, shipments, payments, and what a
// cancellation, exchange or return request recorded.
type Order struct {
	OrderID                 string             `json:"order_id"`
	UserID                  string             `json:"user_id"`
	Address                 UserAddress        `json:"address"`
	Items                   []*OrderItem       `json:"items"`
	Status                  string             `json:"status"`
	Fulfillments            []OrderFulfillment `json:"fulfillments"`
	PaymentHistory          []OrderPayment     `json:"payment_history"`
	CancelReason            *string            `json:"cancel_reason"`
	ExchangeItems           *[]string          `json:"exchange_items"`
	ExchangeNewItems        *[]string          `json:"exchange_new_items"`
	ExchangePaymentMethodID *string            `json:"exchange_payment_method_id"`
	// ExchangePriceDifference is nil, a float64, or the int 0: tau2
	// assigns it without validation, and an exchange of no items stores
	// Python's int 0, which json.dumps writes "0", not "0.0". Decoding
	// (update_db validates again) always gives a float64.
	ExchangePriceDifference any       `json:"exchange_price_difference"`
	ReturnItems             *[]string `json:"return_items"`
	ReturnPaymentMethodID   *string   `json:"return_payment_method_id"`
}

// decodeDB reads a database strictly, as RetailDB.model_validate does.
func decodeDB(data []byte) (*RetailDB, error) {
	var db RetailDB
	if err := domain.DecodeStrict(data, &db); err != nil {
		return nil, err
	}
	if err := checkDB(&db); err != nil {
		return nil, err
	}
	return &db, nil
}

// clone deep-copies the database (a fresh environment's copy: much
// faster than decoding db.json again).
func (db *RetailDB) clone() *RetailDB {
	return &RetailDB{
		Products: cloneDict(db.Products, (*Product).clone),
		Users:    cloneDict(db.Users, (*User).clone),
		Orders:   cloneDict(db.Orders, (*Order).clone),
	}
}

func cloneDict[V any](d *pyjson.Dict[V], cp func(V) V) *pyjson.Dict[V] {
	if d == nil {
		return nil
	}
	out := &pyjson.Dict[V]{}
	for _, k := range d.Keys() {
		v, _ := d.Get(k)
		out.Set(k, cp(v))
	}
	return out
}

func same[V any](v V) V { return v }

func cloneSlice[V any](s []V) []V {
	if s == nil {
		return nil
	}
	return append([]V{}, s...)
}

func (p *Product) clone() *Product {
	c := *p
	c.Variants = cloneDict(p.Variants, (*Variant).clone)
	return &c
}

func (v *Variant) clone() *Variant {
	c := *v
	c.Options = cloneDict(v.Options, same[string])
	return &c
}

func (u *User) clone() *User {
	c := *u
	c.PaymentMethods = cloneDict(u.PaymentMethods, func(pm PaymentMethod) PaymentMethod {
		switch x := pm.(type) {
		case *CreditCard:
			y := *x
			return &y
		case *GiftCard:
			y := *x
			return &y
		case *Paypal:
			y := *x
			return &y
		}
		return pm
	})
	c.Orders = cloneSlice(u.Orders)
	return &c
}

func (o *Order) clone() *Order {
	c := *o
	c.Items = make([]*OrderItem, len(o.Items))
	for i, it := range o.Items {
		x := *it
		x.Options = cloneDict(it.Options, same[string])
		c.Items[i] = &x
	}
	if o.Items == nil {
		c.Items = nil
	}
	c.Fulfillments = make([]OrderFulfillment, len(o.Fulfillments))
	for i, f := range o.Fulfillments {
		c.Fulfillments[i] = OrderFulfillment{TrackingID: cloneSlice(f.TrackingID), ItemIDs: cloneSlice(f.ItemIDs)}
	}
	c.PaymentHistory = cloneSlice(o.PaymentHistory)
	for _, p := range []**[]string{&c.ExchangeItems, &c.ExchangeNewItems, &c.ReturnItems} {
		if *p != nil {
			s := cloneSlice(**p)
			*p = &s
		}
	}
	// The strings and ExchangePriceDifference are immutable values; the
	// *string fields are only ever replaced, never written through.
	return &c
}
