package airline

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pycalc"
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// Tools is tau2's AirlineTools over one database.
type Tools struct {
	db      *FlightDB
	schemas []domain.Schema
}

var _ domain.Toolkit = (*Tools)(nil)

// tau2's fixed "now", and the ids it hands out: a task makes at most
// three reservations and three certificates.
const now = "2024-05-15T15:00:00"

var (
	newReservationIDs = [...]string{"HATHAT", "HATHAU", "HATHAV"}
	newCertificateIDs = [...]string{"certificate_3221322", "certificate_3221323", "certificate_3221324"}
)

// Class is the Python class name.
func (t *Tools) Class() string { return "AirlineTools" }

// DB is the database.
func (t *Tools) DB() any { return t.db }

// Tools are tau2's descriptions of the tools.
func (t *Tools) Tools() []domain.Schema { return t.schemas }

// Funcs lists the tools, in tau2's order.
func (t *Tools) Funcs() []domain.Func {
	p := func(names ...string) []domain.Param {
		out := make([]domain.Param, len(names))
		for i, n := range names {
			out[i] = domain.Param{Name: n}
		}
		return out
	}
	w := func(name string, params []domain.Param, run func(domain.Args) (any, error)) domain.Func {
		return domain.Func{Name: name, Tool: true, Type: domain.Write, Mutates: true, Params: params, Run: run}
	}
	r := func(name string, typ domain.ToolType, params []domain.Param, run func(domain.Args) (any, error)) domain.Func {
		return domain.Func{Name: name, Tool: true, Type: typ, Params: params, Run: run}
	}
	return []domain.Func{
		w("book_reservation", p("user_id", "origin", "destination", "flight_type", "cabin", "flights",
			"passengers", "payment_methods", "total_baggages", "nonfree_baggages", "insurance"), t.bookReservation),
		r("calculate", domain.Generic, p("expression"), t.calculate),
		w("cancel_reservation", p("reservation_id"), t.cancelReservation),
		r("get_reservation_details", domain.Read, p("reservation_id"), func(a domain.Args) (any, error) {
			return t.reservation(a["reservation_id"])
		}),
		r("get_user_details", domain.Read, p("user_id"), func(a domain.Args) (any, error) {
			return t.user(a["user_id"])
		}),
		r("list_all_airports", domain.Read, nil, func(domain.Args) (any, error) { return airports(), nil }),
		r("search_direct_flight", domain.Read, p("origin", "destination", "date"), t.searchDirectFlight),
		r("search_onestop_flight", domain.Read, p("origin", "destination", "date"), t.searchOnestopFlight),
		w("send_certificate", p("user_id", "amount"), t.sendCertificate),
		r("transfer_to_human_agents", domain.Generic, p("summary"), func(domain.Args) (any, error) {
			return "Transfer successful", nil
		}),
		w("update_reservation_baggages", p("reservation_id", "total_baggages", "nonfree_baggages", "payment_id"),
			t.updateReservationBaggages),
		w("update_reservation_flights", p("reservation_id", "cabin", "flights", "payment_id"), t.updateReservationFlights),
		w("update_reservation_passengers", p("reservation_id", "passengers"), t.updateReservationPassengers),
		r("get_flight_status", domain.Read, p("flight_number", "date"), t.getFlightStatus),
	}
}

// dictKey is a JSON value used as a key of a str-keyed dict.
func dictKey(raw json.RawMessage) (key string, isStr bool, err error) {
	return pyvalue.StrKey(value(raw))
}

// lookup is d[raw] guarded by "raw in d", with notFound's error.
func lookup[V any](d *pyjson.Dict[V], raw json.RawMessage, notFound func() error) (V, error) {
	var zero V
	k, isStr, err := dictKey(raw)
	if err != nil {
		return zero, err
	}
	if v, ok := d.Get(k); isStr && ok {
		return v, nil
	}
	return zero, notFound()
}

func (t *Tools) user(id json.RawMessage) (*User, error) {
	return lookup(t.db.Users, id, func() error { return fmt.Errorf("User %s not found", pyStr(id)) })
}

func (t *Tools) reservation(id json.RawMessage) (*Reservation, error) {
	return lookup(t.db.Reservations, id, func() error { return fmt.Errorf("Reservation %s not found", pyStr(id)) })
}

func (t *Tools) flight(number json.RawMessage) (*Flight, error) {
	return lookup(t.db.Flights, number, func() error { return fmt.Errorf("Flight %s not found", pyStr(number)) })
}

func (t *Tools) flightDate(number, date json.RawMessage) (FlightDate, error) {
	f, err := t.flight(number)
	if err != nil {
		return nil, err
	}
	return lookup(f.Dates, date, func() error {
		return fmt.Errorf("Flight %s not found on date %s", pyStr(number), pyStr(date))
	})
}

// seats is available_seats[cabin] (or prices[cabin]), a KeyError when the
// cabin is not there.
func seats(d *pyjson.Dict[int], cabin json.RawMessage) (int, error) {
	return lookup(d, cabin, func() error { return errors.New(pyRepr(cabin)) })
}

func str(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

func (t *Tools) getFlightStatus(a domain.Args) (any, error) {
	d, err := t.flightDate(a["flight_number"], a["date"])
	if err != nil {
		return nil, err
	}
	return d.DateStatus(), nil
}

func (t *Tools) calculate(a domain.Args) (any, error) {
	expr := a["expression"]
	if k := kind(expr); k != "str" {
		if k == "list" || k == "dict" {
			return nil, fmt.Errorf("calculate: the expression must be a string, not %s", k)
		}
		return nil, fmt.Errorf("'%s' object is not iterable", k)
	}
	return pycalc.Calculate(pyStr(expr))
}

func airports() []AirportCode {
	return []AirportCode{
		{"SFO", "San Francisco"}, {"JFK", "New York"}, {"LAX", "Los Angeles"}, {"ORD", "Chicago"},
		{"DFW", "Dallas"}, {"DEN", "Denver"}, {"SEA", "Seattle"}, {"ATL", "Atlanta"},
		{"MIA", "Miami"}, {"BOS", "Boston"}, {"PHX", "Phoenix"}, {"IAH", "Houston"},
		{"LAS", "Las Vegas"}, {"MCO", "Orlando"}, {"EWR", "Newark"}, {"CLT", "Charlotte"},
		{"MSP", "Minneapolis"}, {"DTW", "Detroit"}, {"PHL", "Philadelphia"}, {"LGA", "LaGuardia"},
	}
}

// pyEqualStr is Python's s == v for a str s and a JSON value v.
func pyEqualStr(s string, v json.RawMessage) bool {
	return kind(v) == "str" && pyStr(v) == s
}

// searchDirect is _search_direct_flight: the flights available on date,
// from origin to destination (a null one matching any), leaving at or
// after leaveAfter when it is set; the conditions in tau2's order, so
// that a date that cannot be a key fails only once a flight matches.
func (t *Tools) searchDirect(date, origin, destination json.RawMessage, leaveAfter *string) ([]*DirectFlight, error) {
	results := []*DirectFlight{}
	for _, f := range t.db.Flights.Values() {
		if kind(origin) != "NoneType" && !pyEqualStr(f.Origin, origin) {
			continue
		}
		if kind(destination) != "NoneType" && !pyEqualStr(f.Destination, destination) {
			continue
		}
		k, isStr, err := dictKey(date)
		if err != nil {
			return nil, err
		}
		d, ok := f.Dates.Get(k)
		if !isStr || !ok || d.DateStatus() != "available" {
			continue
		}
		if leaveAfter != nil && f.ScheduledDepartureTimeEST < *leaveAfter {
			continue
		}
		av := d.(*DateAvailable)
		results = append(results, &DirectFlight{
			FlightNumber: f.FlightNumber, Origin: f.Origin, Destination: f.Destination, Status: "available",
			ScheduledDepartureTimeEST: f.ScheduledDepartureTimeEST, ScheduledArrivalTimeEST: f.ScheduledArrivalTimeEST,
			AvailableSeats: copyDict(av.AvailableSeats), Prices: copyDict(av.Prices),
		})
	}
	return results, nil
}

func copyDict(d *pyjson.Dict[int]) *pyjson.Dict[int] {
	out := &pyjson.Dict[int]{}
	for _, k := range d.Keys() {
		v, _ := d.Get(k)
		out.Set(k, v)
	}
	return out
}

func (t *Tools) searchDirectFlight(a domain.Args) (any, error) {
	return t.searchDirect(a["date"], a["origin"], a["destination"], nil)
}

func (t *Tools) searchOnestopFlight(a domain.Args) (any, error) {
	date := a["date"]
	first, err := t.searchDirect(date, a["origin"], nil, nil)
	if err != nil {
		return nil, err
	}
	results := [][]*DirectFlight{}
	for _, r1 := range first {
		// A first leg found means date is a string key of the data.
		day := pyStr(date)
		r1.Date = &day
		day2 := day
		if strings.Contains(r1.ScheduledArrivalTimeEST, "+1") {
			// tau2 writes the next day without padding, and in May.
			n, err := pyInt(day[max(0, len(day)-2):])
			if err != nil {
				return nil, err
			}
			day2 = fmt.Sprintf("2024-05-%d", n+1)
		}
		second, err := t.searchDirect(str(day2), str(r1.Destination), a["destination"], &r1.ScheduledArrivalTimeEST)
		if err != nil {
			return nil, err
		}
		for _, r2 := range second {
			d2 := day2
			r2.Date = &d2
			results = append(results, []*DirectFlight{r1, r2})
		}
	}
	return results, nil
}

// pyInt is Python's int(s) of a short string.
func pyInt(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid literal for int() with base 10: %s", pyvalue.StrRepr(s))
	}
	return n, nil
}

func (t *Tools) cancelReservation(a domain.Args) (any, error) {
	r, err := t.reservation(a["reservation_id"])
	if err != nil {
		return nil, err
	}
	// Every payment so far is reversed, earlier refunds included; seats
	// are not released (tau2 does not).
	for _, p := range r.PaymentHistory { // the history as it was: range reads it once
		r.PaymentHistory = append(r.PaymentHistory, Payment{PaymentID: p.PaymentID, Amount: -p.Amount})
	}
	cancelled := "cancelled"
	r.Status = &cancelled
	return r, nil
}

func (t *Tools) sendCertificate(a domain.Args) (any, error) {
	u, err := t.user(a["user_id"])
	if err != nil {
		return nil, err
	}
	raw := a["amount"]
	for _, id := range newCertificateIDs {
		if u.PaymentMethods.Has(id) {
			continue
		}
		var ve pyvalue.ValidationError
		ve.Model = "Certificate"
		amount := ve.Float("amount", value(raw))
		if err := ve.Err(); err != nil {
			return nil, err
		}
		u.PaymentMethods.Set(id, &Certificate{Source: "certificate", ID: id, Amount: amount})
		return fmt.Sprintf("Certificate %s added to user %s with amount %s.", id, pyStr(a["user_id"]), pyStr(raw)), nil
	}
	return nil, errors.New("Too many certificates")
}
