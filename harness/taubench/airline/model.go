package airline

import (
	"encoding/json"
	"fmt"

	"evals.si/harness/taubench/pyjson"
)

// The models are tau2's (domains/airline/data_model.py), fields in its
// order, which is the order model_dump writes them in. Python dicts are
// *pyjson.Dict, whose nil is a missing field the loader refuses.

// FlightDB is the airline database.
type FlightDB struct {
	Flights      *pyjson.Dict[*Flight]      `json:"flights"`
	Users        *pyjson.Dict[*User]        `json:"users"`
	Reservations *pyjson.Dict[*Reservation] `json:"reservations"`
}

// Flight is one scheduled flight and its status on each date.
type Flight struct {
	FlightNumber              string                   `json:"flight_number"`
	Origin                    string                   `json:"origin"`
	Destination               string                   `json:"destination"`
	ScheduledDepartureTimeEST string                   `json:"scheduled_departure_time_est"`
	ScheduledArrivalTimeEST   string                   `json:"scheduled_arrival_time_est"`
	Dates                     *pyjson.Dict[FlightDate] `json:"dates"`
}

// FlightDate is tau2's FlightDateStatus union: one of the *Date* types
// below, told apart by its status.
type FlightDate interface {
	DateStatus() string
}

// DateAvailable is a flight date open for booking.
type DateAvailable struct {
	Status         string            `json:"status"`
	AvailableSeats *pyjson.Dict[int] `json:"available_seats"`
	Prices         *pyjson.Dict[int] `json:"prices"`
}

// DateLanded is a flight date that has landed.
type DateLanded struct {
	Status                 string `json:"status"`
	ActualDepartureTimeEST string `json:"actual_departure_time_est"`
	ActualArrivalTimeEST   string `json:"actual_arrival_time_est"`
}

// DateCancelled is a cancelled flight date.
type DateCancelled struct {
	Status string `json:"status"`
}

// DateDelayed is a delayed flight date.
type DateDelayed struct {
	Status                    string `json:"status"`
	EstimatedDepartureTimeEST string `json:"estimated_departure_time_est"`
	EstimatedArrivalTimeEST   string `json:"estimated_arrival_time_est"`
}

// DateFlying is a flight date in the air.
type DateFlying struct {
	Status                  string `json:"status"`
	ActualDepartureTimeEST  string `json:"actual_departure_time_est"`
	EstimatedArrivalTimeEST string `json:"estimated_arrival_time_est"`
}

// DateOnTime is a flight date expected on time.
type DateOnTime struct {
	Status                    string `json:"status"`
	EstimatedDepartureTimeEST string `json:"estimated_departure_time_est"`
	EstimatedArrivalTimeEST   string `json:"estimated_arrival_time_est"`
}

func (d *DateAvailable) DateStatus() string { return d.Status }
func (d *DateLanded) DateStatus() string    { return d.Status }
func (d *DateCancelled) DateStatus() string { return d.Status }
func (d *DateDelayed) DateStatus() string   { return d.Status }
func (d *DateFlying) DateStatus() string    { return d.Status }
func (d *DateOnTime) DateStatus() string    { return d.Status }

// UnmarshalJSON reads a flight, each date as the variant its status
// names. Within a variant, fields it does not have are ignored, as
// pydantic's union validation does.
func (f *Flight) UnmarshalJSON(data []byte) error {
	type plain Flight
	var aux struct {
		plain
		Dates *pyjson.Dict[json.RawMessage] `json:"dates"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	*f = Flight(aux.plain)
	if aux.Dates == nil {
		return fmt.Errorf("flight %s: no dates", f.FlightNumber)
	}
	f.Dates = &pyjson.Dict[FlightDate]{}
	for _, day := range aux.Dates.Keys() {
		raw, _ := aux.Dates.Get(day)
		d, err := decodeFlightDate(raw)
		if err != nil {
			return fmt.Errorf("flight %s on %s: %w", f.FlightNumber, day, err)
		}
		f.Dates.Set(day, d)
	}
	return nil
}

func decodeFlightDate(raw json.RawMessage) (FlightDate, error) {
	var head struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, err
	}
	var d FlightDate
	switch head.Status {
	case "available":
		d = &DateAvailable{}
	case "landed":
		d = &DateLanded{}
	case "cancelled":
		d = &DateCancelled{}
	case "delayed":
		d = &DateDelayed{}
	case "flying":
		d = &DateFlying{}
	case "on time":
		d = &DateOnTime{}
	default:
		return nil, fmt.Errorf("unknown flight status %q", head.Status)
	}
	if err := json.Unmarshal(raw, d); err != nil {
		return nil, err
	}
	if a, ok := d.(*DateAvailable); ok && (a.AvailableSeats == nil || a.Prices == nil) {
		return nil, fmt.Errorf("an available date needs available_seats and prices")
	}
	return d, nil
}

// Name is a person's name.
type Name struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
}

// Address is a user's address.
type Address struct {
	Address1 string  `json:"address1"`
	Address2 *string `json:"address2"`
	City     string  `json:"city"`
	Country  string  `json:"country"`
	State    string  `json:"state"`
	Zip      string  `json:"zip"`
}

// PaymentMethod is tau2's PaymentMethod union: a *CreditCard, *GiftCard
// or *Certificate, told apart by its source.
type PaymentMethod interface {
	PaymentSource() string
}

// CreditCard is a saved credit card.
type CreditCard struct {
	Source   string `json:"source"`
	ID       string `json:"id"`
	Brand    string `json:"brand"`
	LastFour string `json:"last_four"`
}

// GiftCard is a gift card and its balance.
type GiftCard struct {
	Source string  `json:"source"`
	ID     string  `json:"id"`
	Amount float64 `json:"amount"`
}

// Certificate is a travel certificate, spent whole.
type Certificate struct {
	Source string  `json:"source"`
	ID     string  `json:"id"`
	Amount float64 `json:"amount"`
}

func (c *CreditCard) PaymentSource() string  { return c.Source }
func (g *GiftCard) PaymentSource() string    { return g.Source }
func (c *Certificate) PaymentSource() string { return c.Source }

func decodePaymentMethod(raw json.RawMessage) (PaymentMethod, error) {
	var head struct {
		Source string `json:"source"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, err
	}
	var m PaymentMethod
	switch head.Source {
	case "credit_card":
		m = &CreditCard{}
	case "gift_card":
		m = &GiftCard{}
	case "certificate":
		m = &Certificate{}
	default:
		return nil, fmt.Errorf("unknown payment method source %q", head.Source)
	}
	if err := json.Unmarshal(raw, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Payment is one payment (or refund, negative) of a reservation.
type Payment struct {
	PaymentID string `json:"payment_id"`
	Amount    int    `json:"amount"`
}

// Passenger is a traveller.
type Passenger struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	DOB       string `json:"dob"`
}

// User is a customer.
type User struct {
	UserID          string                      `json:"user_id"`
	Name            Name                        `json:"name"`
	Address         Address                     `json:"address"`
	Email           string                      `json:"email"`
	DOB             string                      `json:"dob"`
	PaymentMethods  *pyjson.Dict[PaymentMethod] `json:"payment_methods"`
	SavedPassengers []Passenger                 `json:"saved_passengers"`
	Membership      string                      `json:"membership"`
	Reservations    []string                    `json:"reservations"`
}

// ReservationFlight is one flight of a reservation, at the price paid.
type ReservationFlight struct {
	FlightNumber string `json:"flight_number"`
	Origin       string `json:"origin"`
	Destination  string `json:"destination"`
	Date         string `json:"date"`
	Price        int    `json:"price"`
}

// Reservation is a booking.
type Reservation struct {
	ReservationID   string              `json:"reservation_id"`
	UserID          string              `json:"user_id"`
	Origin          string              `json:"origin"`
	Destination     string              `json:"destination"`
	FlightType      string              `json:"flight_type"`
	Cabin           string              `json:"cabin"`
	Flights         []ReservationFlight `json:"flights"`
	Passengers      []Passenger         `json:"passengers"`
	PaymentHistory  []Payment           `json:"payment_history"`
	CreatedAt       string              `json:"created_at"`
	TotalBaggages   int                 `json:"total_baggages"`
	NonfreeBaggages int                 `json:"nonfree_baggages"`
	Insurance       string              `json:"insurance"`
	Status          *string             `json:"status"`
}

// DirectFlight is a flight on one date as a search answers it.
type DirectFlight struct {
	FlightNumber              string            `json:"flight_number"`
	Origin                    string            `json:"origin"`
	Destination               string            `json:"destination"`
	Status                    string            `json:"status"`
	ScheduledDepartureTimeEST string            `json:"scheduled_departure_time_est"`
	ScheduledArrivalTimeEST   string            `json:"scheduled_arrival_time_est"`
	Date                      *string           `json:"date"`
	AvailableSeats            *pyjson.Dict[int] `json:"available_seats"`
	Prices                    *pyjson.Dict[int] `json:"prices"`
}

// AirportCode is an airport.
type AirportCode struct {
	IATA string `json:"iata"`
	City string `json:"city"`
}

// UnmarshalJSON reads a user, each payment method as the variant its
// source names.
func (u *User) UnmarshalJSON(data []byte) error {
	type plain User
	var aux struct {
		plain
		PaymentMethods *pyjson.Dict[json.RawMessage] `json:"payment_methods"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	*u = User(aux.plain)
	if aux.PaymentMethods == nil {
		return fmt.Errorf("user %s: no payment_methods", u.UserID)
	}
	u.PaymentMethods = &pyjson.Dict[PaymentMethod]{}
	for _, id := range aux.PaymentMethods.Keys() {
		raw, _ := aux.PaymentMethods.Get(id)
		m, err := decodePaymentMethod(raw)
		if err != nil {
			return fmt.Errorf("user %s, payment method %s: %w", u.UserID, id, err)
		}
		u.PaymentMethods.Set(id, m)
	}
	return nil
}

// clone is a deep copy of the database: every environment gets its own.
func (db *FlightDB) clone() *FlightDB {
	return &FlightDB{
		Flights:      cloneDict(db.Flights, (*Flight).clone),
		Users:        cloneDict(db.Users, (*User).clone),
		Reservations: cloneDict(db.Reservations, (*Reservation).clone),
	}
}

func cloneDict[V any](d *pyjson.Dict[V], clone func(V) V) *pyjson.Dict[V] {
	out := &pyjson.Dict[V]{}
	for _, k := range d.Keys() {
		v, _ := d.Get(k)
		out.Set(k, clone(v))
	}
	return out
}

func same[V any](v V) V { return v }

func (f *Flight) clone() *Flight {
	c := *f
	c.Dates = cloneDict(f.Dates, func(d FlightDate) FlightDate {
		switch d := d.(type) {
		case *DateAvailable:
			return &DateAvailable{Status: d.Status, AvailableSeats: cloneDict(d.AvailableSeats, same[int]),
				Prices: cloneDict(d.Prices, same[int])}
		case *DateLanded:
			x := *d
			return &x
		case *DateCancelled:
			x := *d
			return &x
		case *DateDelayed:
			x := *d
			return &x
		case *DateFlying:
			x := *d
			return &x
		case *DateOnTime:
			x := *d
			return &x
		}
		panic(fmt.Sprintf("airline: unknown flight date type %T", d))
	})
	return &c
}

func (u *User) clone() *User {
	c := *u
	c.PaymentMethods = cloneDict(u.PaymentMethods, func(m PaymentMethod) PaymentMethod {
		switch m := m.(type) {
		case *CreditCard:
			x := *m
			return &x
		case *GiftCard:
			x := *m
			return &x
		case *Certificate:
			x := *m
			return &x
		}
		panic(fmt.Sprintf("airline: unknown payment method type %T", m))
	})
	c.SavedPassengers = append([]Passenger(nil), u.SavedPassengers...)
	c.Reservations = append([]string(nil), u.Reservations...)
	return &c
}

func (r *Reservation) clone() *Reservation {
	c := *r
	c.Flights = append([]ReservationFlight(nil), r.Flights...)
	c.Passengers = append([]Passenger(nil), r.Passengers...)
	c.PaymentHistory = append([]Payment(nil), r.PaymentHistory...)
	return &c
}
