package airline

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// The writing tools: booking, and changing a reservation's flights,
// baggage and passengers. tau2 turns a list of dicts into its models first
// (FlightInfo, Passenger, Payment); a list with anything else stays as it
// is and fails where it is used.

// listArg is a list argument's items, and whether all are dicts.
func listArg(raw json.RawMessage, name string) (items []json.RawMessage, allDicts bool, err error) {
	switch k := kind(raw); k {
	case "list":
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, false, fmt.Errorf("argument %s: %w", name, err)
		}
	case "str", "dict":
		return nil, false, fmt.Errorf("argument %s: %s is not a list", name, raw)
	default:
		return nil, false, fmt.Errorf("'%s' object is not iterable", k)
	}
	for _, it := range items {
		if kind(it) != "dict" {
			return items, false, nil
		}
	}
	return items, true, nil
}

type flightInfo struct {
	number, date string
}

// flightInfos converts a flights argument as tau2 does. A list that is
// not all dicts is left as it is: attrErr is the AttributeError its first
// use raises.
func flightInfos(raw json.RawMessage) (infos []flightInfo, attrErr, err error) {
	items, allDicts, err := listArg(raw, "flights")
	if err != nil {
		return nil, nil, err
	}
	if !allDicts {
		return nil, fmt.Errorf("'%s' object has no attribute 'flight_number'", kind(items[0])), nil
	}
	for _, it := range items {
		f, err := newFields(it)
		if err != nil {
			return nil, nil, err
		}
		ve := pyvalue.ValidationError{Model: "FlightInfo"}
		fi := flightInfo{number: f.str(&ve, "", "flight_number"), date: f.str(&ve, "", "date")}
		if err := ve.Err(); err != nil {
			return nil, nil, err
		}
		infos = append(infos, fi)
	}
	return infos, nil, nil
}

func passenger(ve *pyvalue.ValidationError, prefix string, raw json.RawMessage) Passenger {
	f, _ := newFields(raw)
	return Passenger{FirstName: f.str(ve, prefix, "first_name"), LastName: f.str(ve, prefix, "last_name"), DOB: f.str(ve, prefix, "dob")}
}

func payment(ve *pyvalue.ValidationError, prefix string, raw json.RawMessage) Payment {
	f, _ := newFields(raw)
	return Payment{PaymentID: f.str(ve, prefix, "payment_id"), Amount: f.integer(ve, prefix, "amount")}
}

// modelList is a list argument converted to a model's instances when all
// its items are dicts (Model(**d) each, the first failure raised), and
// otherwise validated item by item only where a model field takes it.
type modelList[T any] struct {
	items     []json.RawMessage
	converted []T
	allDicts  bool
}

func convertList[T any](raw json.RawMessage, name, model string, conv func(*pyvalue.ValidationError, string, json.RawMessage) T) (modelList[T], error) {
	items, allDicts, err := listArg(raw, name)
	if err != nil {
		return modelList[T]{}, err
	}
	l := modelList[T]{items: items, allDicts: allDicts}
	if allDicts {
		for _, it := range items {
			ve := pyvalue.ValidationError{Model: model}
			v := conv(&ve, "", it)
			if err := ve.Err(); err != nil {
				return modelList[T]{}, err
			}
			l.converted = append(l.converted, v)
		}
	}
	return l, nil
}

// validate is the list validated as a model's field: dicts become
// instances, anything else is an error.
func (l modelList[T]) validate(ve *pyvalue.ValidationError, field, model string, conv func(*pyvalue.ValidationError, string, json.RawMessage) T) []T {
	if l.allDicts {
		return append([]T{}, l.converted...)
	}
	out := []T{}
	for i, it := range l.items {
		loc := field + "." + strconv.Itoa(i)
		if kind(it) != "dict" {
			ve.Add(loc, "model_type", "Input should be a valid dictionary or instance of "+model, value(it))
			continue
		}
		out = append(out, conv(ve, loc+".", it))
	}
	return out
}

// price is a running total that Python keeps as an int until a float
// joins it.
type price struct {
	v       float64
	isFloat bool
}

func (p price) String() string {
	if p.isFloat {
		return pyjson.FloatRepr(p.v)
	}
	return strconv.FormatInt(int64(p.v), 10)
}

func (t *Tools) bookReservation(a domain.Args) (any, error) {
	flights, flightsAttrErr, err := flightInfos(a["flights"])
	if err != nil {
		return nil, err
	}
	passengers, err := convertList(a["passengers"], "passengers", "Passenger", passenger)
	if err != nil {
		return nil, err
	}
	payments, err := convertList(a["payment_methods"], "payment_methods", "Payment", payment)
	if err != nil {
		return nil, err
	}
	user, err := t.user(a["user_id"])
	if err != nil {
		return nil, err
	}
	id, err := t.newReservationID()
	if err != nil {
		return nil, err
	}

	ve := pyvalue.ValidationError{Model: "Reservation"}
	res := &Reservation{
		ReservationID:   id,
		UserID:          user.UserID,
		Origin:          ve.Str("origin", value(a["origin"])),
		Destination:     ve.Str("destination", value(a["destination"])),
		FlightType:      ve.Literal("flight_type", value(a["flight_type"]), "round_trip", "one_way"),
		Cabin:           ve.Literal("cabin", value(a["cabin"]), "business", "economy", "basic_economy"),
		Flights:         []ReservationFlight{},
		Passengers:      passengers.validate(&ve, "passengers", "Passenger", passenger),
		PaymentHistory:  payments.validate(&ve, "payment_history", "Payment", payment),
		CreatedAt:       now,
		TotalBaggages:   ve.Int("total_baggages", value(a["total_baggages"])),
		NonfreeBaggages: ve.Int("nonfree_baggages", value(a["nonfree_baggages"])),
		Insurance:       ve.Literal("insurance", value(a["insurance"]), "yes", "no"),
	}
	if err := ve.Err(); err != nil {
		return nil, err
	}
	n := len(res.Passengers)

	total := price{}
	var dates []*DateAvailable
	if flightsAttrErr != nil {
		return nil, flightsAttrErr
	}
	for _, fi := range flights {
		f, err := t.flight(str(fi.number))
		if err != nil {
			return nil, err
		}
		d, err := t.flightDate(str(fi.number), str(fi.date))
		if err != nil {
			return nil, err
		}
		av, ok := d.(*DateAvailable)
		if !ok {
			return nil, fmt.Errorf("Flight %s not available on date %s", fi.number, fi.date)
		}
		left, err := seats(av.AvailableSeats, str(res.Cabin))
		if err != nil {
			return nil, err
		}
		if left < n {
			return nil, fmt.Errorf("Not enough seats on flight %s", fi.number)
		}
		p, err := seats(av.Prices, str(res.Cabin))
		if err != nil {
			return nil, err
		}
		res.Flights = append(res.Flights, ReservationFlight{
			FlightNumber: fi.number, Origin: f.Origin, Destination: f.Destination, Date: fi.date, Price: p,
		})
		dates = append(dates, av)
		total.v += float64(p * n)
	}
	if res.Insurance == "yes" {
		total.v += float64(30 * n)
	}
	// The baggage fee is priced from the argument as given.
	switch nonfree := a["nonfree_baggages"]; kind(nonfree) {
	case "int", "bool":
		total.v += float64(50 * res.NonfreeBaggages)
	case "float":
		f, _ := strconv.ParseFloat(string(nonfree), 64)
		total.v += 50 * f
		total.isFloat = true
	default:
		return nil, fmt.Errorf("unsupported operand type(s) for +=: 'int' and '%s'", kind(nonfree))
	}

	for _, p := range res.PaymentHistory {
		m, ok := user.PaymentMethods.Get(p.PaymentID)
		if !ok {
			return nil, fmt.Errorf("Payment method %s not found", p.PaymentID)
		}
		if balance, ok := balanceOf(m); ok && balance < float64(p.Amount) {
			return nil, fmt.Errorf("Not enough balance in payment method %s", p.PaymentID)
		}
	}
	paid := 0
	for _, p := range res.PaymentHistory {
		paid += p.Amount
	}
	if float64(paid) != total.v {
		return nil, fmt.Errorf("Payment amount does not add up, total price is %s, but paid %d", total, paid)
	}

	// The checks passed: charge. A certificate named twice is gone the
	// second time, which fails after the first charges (as in tau2).
	for _, p := range res.PaymentHistory {
		m, ok := user.PaymentMethods.Get(p.PaymentID)
		if !ok {
			return nil, errors.New(pyvalue.StrRepr(p.PaymentID))
		}
		switch m := m.(type) {
		case *GiftCard:
			m.Amount -= float64(p.Amount)
		case *Certificate:
			user.PaymentMethods.Delete(p.PaymentID)
		}
	}
	for _, d := range dates {
		left, _ := d.AvailableSeats.Get(res.Cabin)
		d.AvailableSeats.Set(res.Cabin, left-n)
	}
	t.db.Reservations.Set(id, res)
	user.Reservations = append(user.Reservations, id)
	return res, nil
}

// balanceOf is a gift card's or a certificate's amount.
func balanceOf(m PaymentMethod) (float64, bool) {
	switch m := m.(type) {
	case *GiftCard:
		return m.Amount, true
	case *Certificate:
		return m.Amount, true
	}
	return 0, false
}

func (t *Tools) newReservationID() (string, error) {
	for _, id := range newReservationIDs {
		if !t.db.Reservations.Has(id) {
			return id, nil
		}
	}
	return "", errors.New("Too many reservations")
}

// paymentForUpdate is _payment_for_update: the payment for a change
// costing total (a refund when negative), none when it is 0; a gift card
// is charged at once, a certificate refused.
func paymentForUpdate(user *User, paymentID json.RawMessage, total int) (*Payment, error) {
	m, err := lookup(user.PaymentMethods, paymentID, func() error { return errors.New("Payment method not found") })
	if err != nil {
		return nil, err
	}
	switch m := m.(type) {
	case *Certificate:
		return nil, errors.New("Certificate cannot be used to update reservation")
	case *GiftCard:
		if m.Amount < float64(total) {
			return nil, errors.New("Gift card balance is not enough")
		}
		m.Amount -= float64(total)
	}
	if total == 0 {
		return nil, nil
	}
	return &Payment{PaymentID: pyStr(paymentID), Amount: total}, nil
}

// reservationAndUser looks up a reservation and its user.
func (t *Tools) reservationAndUser(id json.RawMessage) (*Reservation, *User, error) {
	r, err := t.reservation(id)
	if err != nil {
		return nil, nil, err
	}
	u, err := t.user(str(r.UserID))
	if err != nil {
		return nil, nil, err
	}
	return r, u, nil
}

// intArg is an integer argument tau2 uses without validating: other types
// would be stored or computed with as they are, which this port refuses.
func intArg(a domain.Args, name string) (int, error) {
	raw := a[name]
	if kind(raw) != "int" {
		return 0, fmt.Errorf("argument %s: %s is not an integer", name, raw)
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		return 0, fmt.Errorf("argument %s: %s is not an integer", name, raw)
	}
	return n, nil
}

func (t *Tools) updateReservationBaggages(a domain.Args) (any, error) {
	res, user, err := t.reservationAndUser(a["reservation_id"])
	if err != nil {
		return nil, err
	}
	switch k := kind(a["nonfree_baggages"]); k {
	case "str", "NoneType", "list", "dict":
		return nil, fmt.Errorf("unsupported operand type(s) for -: '%s' and 'int'", k)
	}
	nonfree, err := intArg(a, "nonfree_baggages")
	if err != nil {
		return nil, err
	}
	totalBags, err := intArg(a, "total_baggages")
	if err != nil {
		return nil, err
	}
	p, err := paymentForUpdate(user, a["payment_id"], 50*max(0, nonfree-res.NonfreeBaggages))
	if err != nil {
		return nil, err
	}
	if p != nil {
		res.PaymentHistory = append(res.PaymentHistory, *p)
	}
	res.TotalBaggages = totalBags
	res.NonfreeBaggages = nonfree
	return res, nil
}

func (t *Tools) updateReservationFlights(a domain.Args) (any, error) {
	flights, attrErr, err := flightInfos(a["flights"])
	if err != nil {
		return nil, err
	}
	res, user, err := t.reservationAndUser(a["reservation_id"])
	if err != nil {
		return nil, err
	}
	cabin := a["cabin"]
	n := len(res.Passengers)
	if attrErr != nil {
		return nil, attrErr
	}
	total := 0
	kept := []ReservationFlight{}
	for _, fi := range flights {
		// A flight already booked, in an unchanged cabin, keeps its price.
		if m := matchingFlight(res, fi, cabin); m != nil {
			total += m.Price * n
			kept = append(kept, *m)
			continue
		}
		f, err := t.flight(str(fi.number))
		if err != nil {
			return nil, err
		}
		d, err := t.flightDate(str(fi.number), str(fi.date))
		if err != nil {
			return nil, err
		}
		av, ok := d.(*DateAvailable)
		if !ok {
			return nil, fmt.Errorf("Flight %s not available on date %s", fi.number, fi.date)
		}
		left, err := seats(av.AvailableSeats, cabin)
		if err != nil {
			return nil, err
		}
		if left < n {
			return nil, fmt.Errorf("Not enough seats on flight %s", fi.number)
		}
		p, err := seats(av.Prices, cabin)
		if err != nil {
			return nil, err
		}
		kept = append(kept, ReservationFlight{FlightNumber: fi.number, Origin: f.Origin, Destination: f.Destination, Date: fi.date, Price: p})
		total += p * n
	}
	paid := 0
	for _, f := range res.Flights {
		paid += f.Price
	}
	total -= paid * n
	if kind(cabin) != "str" {
		// Only reachable with no flights: tau2 would store the value as is.
		return nil, fmt.Errorf("argument cabin: %s is not a string", cabin)
	}

	p, err := paymentForUpdate(user, a["payment_id"], total)
	if err != nil {
		return nil, err
	}
	if p != nil {
		res.PaymentHistory = append(res.PaymentHistory, *p)
	}
	// Seats are not moved: tau2 does not update the flights here.
	res.Flights = kept
	res.Cabin = pyStr(cabin)
	return res, nil
}

func matchingFlight(res *Reservation, fi flightInfo, cabin json.RawMessage) *ReservationFlight {
	for i := range res.Flights {
		f := &res.Flights[i]
		if f.FlightNumber == fi.number && f.Date == fi.date && pyEqualStr(res.Cabin, cabin) {
			return f
		}
	}
	return nil
}

func (t *Tools) updateReservationPassengers(a domain.Args) (any, error) {
	passengers, err := convertList(a["passengers"], "passengers", "Passenger", passenger)
	if err != nil {
		return nil, err
	}
	res, err := t.reservation(a["reservation_id"])
	if err != nil {
		return nil, err
	}
	if len(passengers.items) != len(res.Passengers) {
		return nil, errors.New("Number of passengers does not match")
	}
	if !passengers.allDicts {
		// tau2 would store the items as they are.
		return nil, errors.New("argument passengers: every passenger must be an object")
	}
	res.Passengers = append([]Passenger{}, passengers.converted...)
	return res, nil
}
