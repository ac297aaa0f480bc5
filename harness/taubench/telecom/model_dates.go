package telecom

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Dates in the carrier's database. tau2's db.toml holds them as strings
// that pydantic parses into date and datetime objects; model_dump keeps
// the objects and json.dumps(default=str) writes their str(), which for a
// datetime has a space, not a "T": "2025-01-20 14:30:00".

// today is tau2's telecom get_today(): the simulation's fixed date.
func today() Date { return Date{time.Date(2025, 2, 25, 0, 0, 0, 0, time.UTC)} }

// Date is a calendar date (Python's datetime.date).
type Date struct{ t time.Time }

func dateOf(y int, m time.Month, d int) Date { return Date{time.Date(y, m, d, 0, 0, 0, 0, time.UTC)} }

// PyStr is str(date).
func (d Date) PyStr() string { return d.t.Format(time.DateOnly) }

// addDays is date + timedelta(days=n).
func (d Date) addDays(n int) Date { return Date{d.t.AddDate(0, 0, n)} }

// firstOfMonth is date.replace(day=1).
func (d Date) firstOfMonth() Date { return dateOf(d.t.Year(), d.t.Month(), 1) }

// before orders dates.
func (d Date) before(o Date) bool { return d.t.Before(o.t) }

// MarshalJSON writes the ISO date, which UnmarshalJSON reads back.
func (d Date) MarshalJSON() ([]byte, error) { return json.Marshal(d.PyStr()) }

// UnmarshalJSON reads a date as pydantic does from a string:
// "YYYY-MM-DD", or a datetime whose time is midnight.
func (d *Date) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a date string (YYYY-MM-DD), got %s", b)
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		*d = Date{t}
		return nil
	}
	dt, err := parseDateTime(s)
	if err != nil || dt.t.Hour() != 0 || dt.t.Minute() != 0 || dt.t.Second() != 0 || dt.t.Nanosecond() != 0 {
		return fmt.Errorf("want a date (YYYY-MM-DD), got %q", s)
	}
	*d = dateOf(dt.t.Year(), dt.t.Month(), dt.t.Day())
	return nil
}

// DateTime is a date and time (Python's datetime.datetime), naive or
// with a UTC offset.
type DateTime struct {
	t     time.Time
	hasTZ bool
	// dateOnly: a date object where a datetime was declared, as tau2's
	// default for Customer.created_at is; str() gives just the date.
	dateOnly bool
}

// defaultCreatedAt is Customer.created_at's default, DEFAULT_START_DATE:
// a date (pydantic does not validate defaults), so it dumps "2025-01-01".
func defaultCreatedAt() DateTime {
	return DateTime{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), dateOnly: true}
}

// PyStr is str(datetime): "YYYY-MM-DD HH:MM:SS", then ".ffffff" when there
// are microseconds and the offset ("+00:00") when it has one.
func (dt DateTime) PyStr() string { return dt.format(" ") }

func (dt DateTime) format(sep string) string {
	if dt.dateOnly {
		return dt.t.Format(time.DateOnly)
	}
	s := dt.t.Format("2006-01-02" + sep + "15:04:05")
	if us := dt.t.Nanosecond() / 1000; us != 0 {
		s += fmt.Sprintf(".%06d", us)
	}
	if dt.hasTZ {
		_, off := dt.t.Zone()
		sign := "+"
		if off < 0 {
			sign, off = "-", -off
		}
		s += fmt.Sprintf("%s%02d:%02d", sign, off/3600, off/60%60)
		if off%60 != 0 {
			s += fmt.Sprintf(":%02d", off%60)
		}
	}
	return s
}

// MarshalJSON writes the ISO form, which UnmarshalJSON reads back (a
// date-only value becomes midnight, as re-validating a date into a
// datetime field does).
func (dt DateTime) MarshalJSON() ([]byte, error) { return json.Marshal(dt.format("T")) }

// UnmarshalJSON reads a datetime string as pydantic does.
func (dt *DateTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a datetime string (YYYY-MM-DDTHH:MM:SS), got %s", b)
	}
	v, err := parseDateTime(s)
	if err != nil {
		return err
	}
	*dt = v
	return nil
}

// parseDateTime reads the ISO 8601 forms pydantic accepts for a
// datetime: a date alone (midnight), minutes or seconds, up to six
// fractional digits, and an optional Z or ±HH:MM offset.
func parseDateTime(s string) (DateTime, error) {
	bad := fmt.Errorf("want a datetime (YYYY-MM-DDTHH:MM:SS), got %q", s)
	rest := s
	// num takes n digits off rest.
	num := func(n int) (int, bool) {
		if len(rest) < n {
			return 0, false
		}
		v := 0
		for _, c := range []byte(rest[:n]) {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		rest = rest[n:]
		return v, true
	}
	// sep takes one of the bytes in set off rest.
	sep := func(set string) bool {
		if rest != "" && strings.IndexByte(set, rest[0]) >= 0 {
			rest = rest[1:]
			return true
		}
		return false
	}
	var f [6]int // year, month, day, hour, minute, second
	var ok bool
	if f[0], ok = num(4); !ok || !sep("-") {
		return DateTime{}, bad
	}
	if f[1], ok = num(2); !ok || !sep("-") {
		return DateTime{}, bad
	}
	if f[2], ok = num(2); !ok {
		return DateTime{}, bad
	}
	micro, loc, hasTZ := 0, time.UTC, false
	if rest != "" {
		if !sep("Tt ") {
			return DateTime{}, bad
		}
		if f[3], ok = num(2); !ok || !sep(":") {
			return DateTime{}, bad
		}
		if f[4], ok = num(2); !ok {
			return DateTime{}, bad
		}
		if sep(":") {
			if f[5], ok = num(2); !ok {
				return DateTime{}, bad
			}
			if sep(".") {
				digits := 0
				for digits < len(rest) && digits < 7 && rest[digits] >= '0' && rest[digits] <= '9' {
					digits++
				}
				if digits == 0 || digits > 6 {
					return DateTime{}, bad
				}
				micro, _ = num(digits)
				for ; digits < 6; digits++ {
					micro *= 10
				}
			}
		}
		switch {
		case sep("Zz"):
			hasTZ = true
		case rest != "" && (rest[0] == '+' || rest[0] == '-'):
			sign := 1
			if rest[0] == '-' {
				sign = -1
			}
			rest = rest[1:]
			hh, ok1 := num(2)
			sep(":")
			mm, ok2 := num(2)
			if !ok1 || !ok2 {
				return DateTime{}, bad
			}
			hasTZ, loc = true, time.FixedZone("", sign*(hh*3600+mm*60))
		}
		if rest != "" {
			return DateTime{}, bad
		}
	}
	t := time.Date(f[0], time.Month(f[1]), f[2], f[3], f[4], f[5], micro*1000, loc)
	if t.Year() != f[0] || int(t.Month()) != f[1] || t.Day() != f[2] || t.Hour() != f[3] || t.Minute() != f[4] || t.Second() != f[5] {
		return DateTime{}, fmt.Errorf("%q is not a valid datetime", s)
	}
	return DateTime{t: t, hasTZ: hasTZ}, nil
}
