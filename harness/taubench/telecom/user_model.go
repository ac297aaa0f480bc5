package telecom

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"evals.si/harness/taubench/pyjson"
)

// The user's side of telecom (tau2's user_data_model.py): the phone's
// state and the user's surroundings. Every model decodes as pydantic
// validates it: fields absent from the input take tau2's defaults,
// unknown fields and values outside an enum are errors.

// SimStatus is the SIM card's state.
type SimStatus string

// The SIM states.
const (
	SimActive    SimStatus = "active"
	SimMissing   SimStatus = "missing"
	SimLockedPIN SimStatus = "locked_pin"
	SimLockedPUK SimStatus = "locked_puk"
)

// NetworkTechnology is a cellular technology.
type NetworkTechnology string

// The technologies.
const (
	TechNone NetworkTechnology = "none"
	Tech2G   NetworkTechnology = "2G"
	Tech3G   NetworkTechnology = "3G"
	Tech4G   NetworkTechnology = "4G"
	Tech5G   NetworkTechnology = "5G"
)

// NetworkModePreference is the network type the phone prefers.
type NetworkModePreference string

// The preferences, in tau2's order (the order its error text lists them).
const (
	Mode4G5GPreferred NetworkModePreference = "4g_5g_preferred"
	Mode4GOnly        NetworkModePreference = "4g_only"
	Mode3GOnly        NetworkModePreference = "3g_only"
	Mode2GOnly        NetworkModePreference = "2g_only"
)

// SignalStrength is a signal's strength (status bar bars).
type SignalStrength string

// The strengths.
const (
	SignalNone      SignalStrength = "none"
	SignalPoor      SignalStrength = "poor"
	SignalFair      SignalStrength = "fair"
	SignalGood      SignalStrength = "good"
	SignalExcellent SignalStrength = "excellent"
)

// PerformanceLevel is a VPN server's performance.
type PerformanceLevel string

// The levels.
const (
	PerfUnknown   PerformanceLevel = "unknown"
	PerfPoor      PerformanceLevel = "poor"
	PerfFair      PerformanceLevel = "fair"
	PerfGood      PerformanceLevel = "good"
	PerfExcellent PerformanceLevel = "excellent"
)

// NetworkStatus is the cellular connection's state.
type NetworkStatus string

// The states.
const (
	StatusConnected     NetworkStatus = "connected"
	StatusSearching     NetworkStatus = "searching"
	StatusNoService     NetworkStatus = "no_service"
	StatusEmergencyOnly NetworkStatus = "emergency_only"
)

// APNName names an APN configuration.
type APNName string

// The APN names.
const (
	APNInternet APNName = "internet"
	APNBroken   APNName = "broken"
)

// userEnum decodes a string that must be one of members (pydantic
// validates a str Enum field by value).
func userEnum[T ~string](data []byte, v *T, members ...T) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%s is not a string", data)
	}
	for _, m := range members {
		if string(m) == s {
			*v = m
			return nil
		}
	}
	quoted := make([]string, len(members))
	for i, m := range members {
		quoted[i] = "'" + string(m) + "'"
	}
	return fmt.Errorf("%q is not one of %s", s, strings.Join(quoted, ", "))
}

// UnmarshalJSON accepts only the enum's values.
func (v *SimStatus) UnmarshalJSON(b []byte) error {
	return userEnum(b, v, SimActive, SimMissing, SimLockedPIN, SimLockedPUK)
}

// UnmarshalJSON accepts only the enum's values.
func (v *NetworkTechnology) UnmarshalJSON(b []byte) error {
	return userEnum(b, v, TechNone, Tech2G, Tech3G, Tech4G, Tech5G)
}

// modePreferences are the preferences in tau2's order (its error text
// lists them so).
func modePreferences() []NetworkModePreference {
	return []NetworkModePreference{Mode4G5GPreferred, Mode4GOnly, Mode3GOnly, Mode2GOnly}
}

// UnmarshalJSON accepts only the enum's values.
func (v *NetworkModePreference) UnmarshalJSON(b []byte) error {
	return userEnum(b, v, modePreferences()...)
}

// UnmarshalJSON accepts only the enum's values.
func (v *SignalStrength) UnmarshalJSON(b []byte) error {
	return userEnum(b, v, SignalNone, SignalPoor, SignalFair, SignalGood, SignalExcellent)
}

// UnmarshalJSON accepts only the enum's values.
func (v *PerformanceLevel) UnmarshalJSON(b []byte) error {
	return userEnum(b, v, PerfUnknown, PerfPoor, PerfFair, PerfGood, PerfExcellent)
}

// UnmarshalJSON accepts only the enum's values.
func (v *NetworkStatus) UnmarshalJSON(b []byte) error {
	return userEnum(b, v, networkStatuses()...)
}

// networkStatuses are the statuses in tau2's order.
func networkStatuses() []NetworkStatus {
	return []NetworkStatus{StatusConnected, StatusSearching, StatusNoService, StatusEmergencyOnly}
}

// UnmarshalJSON accepts only the enum's values.
func (v *APNName) UnmarshalJSON(b []byte) error { return userEnum(b, v, APNInternet, APNBroken) }

// userDecode decodes data over v (already holding the defaults), refusing
// unknown fields: custom UnmarshalJSON methods do not inherit the outer
// decoder's DisallowUnknownFields, so each model asks for it itself.
func userDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// APNSettings is one Access Point Name configuration.
type APNSettings struct {
	APNName       APNName `json:"apn_name"`
	ResetAtReboot bool    `json:"reset_at_reboot"`
	MMSAPN        *string `json:"mms_apn"`
	MMSCURL       *string `json:"mmsc_url"`
	MMSProxy      *string `json:"mms_proxy"`
	MMSPort       *int    `json:"mms_port"`
}

// DefaultAPNSettings is APNSettings() with tau2's defaults (what a reboot
// restores after reset_apn_settings).
func DefaultAPNSettings() APNSettings {
	return APNSettings{
		APNName: APNInternet,
		MMSAPN:  userStr("mms"),
		MMSCURL: userStr("http://mms.carrier.com/mms/wapenc"),
	}
}

// UnmarshalJSON fills absent fields with the defaults.
func (a *APNSettings) UnmarshalJSON(b []byte) error {
	type plain APNSettings
	p := plain(DefaultAPNSettings())
	if err := userDecode(b, &p); err != nil {
		return fmt.Errorf("APNSettings: %w", err)
	}
	*a = APNSettings(p)
	return nil
}

// VpnDetails describes the VPN connection.
type VpnDetails struct {
	ServerAddress     *string          `json:"server_address"`
	Protocol          *string          `json:"protocol"`
	ServerPerformance PerformanceLevel `json:"server_performance"`
}

// UnmarshalJSON fills absent fields with the defaults.
func (v *VpnDetails) UnmarshalJSON(b []byte) error {
	type plain VpnDetails
	p := plain{ServerPerformance: PerfUnknown}
	if err := userDecode(b, &p); err != nil {
		return fmt.Errorf("VpnDetails: %w", err)
	}
	*v = VpnDetails(p)
	return nil
}

// AppPermissions are an app's permissions. Their order is the order tau2
// lists them in (model_dump's).
type AppPermissions struct {
	SMS     bool `json:"sms"`
	Storage bool `json:"storage"`
	Phone   bool `json:"phone"`
	Network bool `json:"network"`
}

// UnmarshalJSON refuses unknown permissions.
func (p *AppPermissions) UnmarshalJSON(b []byte) error {
	type plain AppPermissions
	var q plain
	if err := userDecode(b, &q); err != nil {
		return fmt.Errorf("AppPermissions: %w", err)
	}
	*p = AppPermissions(q)
	return nil
}

// permissionNames are AppPermissions' fields by their names, in order.
func permissionNames() []string { return []string{"sms", "storage", "phone", "network"} }

// field returns the permission called name, nil if there is none.
func (p *AppPermissions) field(name string) *bool {
	switch name {
	case "sms":
		return &p.SMS
	case "storage":
		return &p.Storage
	case "phone":
		return &p.Phone
	case "network":
		return &p.Network
	}
	return nil
}

// granted lists the permissions granted, in order.
func (p *AppPermissions) granted() []string {
	var out []string
	for _, n := range permissionNames() {
		if *p.field(n) {
			out = append(out, n)
		}
	}
	return out
}

// AppStatus is an installed app.
type AppStatus struct {
	AppName     string         `json:"app_name"`
	Permissions AppPermissions `json:"permissions"`
}

// UnmarshalJSON requires app_name, as the model does.
func (a *AppStatus) UnmarshalJSON(b []byte) error {
	type plain struct {
		AppName     *string        `json:"app_name"`
		Permissions AppPermissions `json:"permissions"`
	}
	var p plain
	if err := userDecode(b, &p); err != nil {
		return fmt.Errorf("AppStatus: %w", err)
	}
	if p.AppName == nil {
		return fmt.Errorf("AppStatus: app_name is required")
	}
	*a = AppStatus{AppName: *p.AppName, Permissions: p.Permissions}
	return nil
}

// StatusBar is tau2's model of the status bar's indicators. tau2 declares
// it but neither database holds one: the status bar tools render text.
type StatusBar struct {
	SignalStrength  SignalStrength    `json:"signal_strength"`
	NetworkType     NetworkTechnology `json:"network_type"`
	WifiConnected   bool              `json:"wifi_connected"`
	AirplaneMode    bool              `json:"airplane_mode"`
	VpnActive       bool              `json:"vpn_active"`
	DataSaverActive bool              `json:"data_saver_active"`
	BatteryLevel    int               `json:"battery_level"`
}

// Phone is the user's phone (tau2's MockPhoneAttributes).
type Phone struct {
	SimCardStatus              SimStatus                `json:"sim_card_status"`
	SimCardMissing             bool                     `json:"sim_card_missing"`
	AirplaneMode               bool                     `json:"airplane_mode"`
	NetworkSignalStrength      SignalStrength           `json:"network_signal_strength"`
	NetworkTechnologyConnected NetworkTechnology        `json:"network_technology_connected"`
	NetworkConnectionStatus    NetworkStatus            `json:"network_connection_status"`
	BatteryLevel               int                      `json:"battery_level"`
	DataEnabled                bool                     `json:"data_enabled"`
	RoamingEnabled             bool                     `json:"roaming_enabled"`
	NetworkModePreference      NetworkModePreference    `json:"network_mode_preference"`
	ActiveAPNSettings          APNSettings              `json:"active_apn_settings"`
	WifiEnabled                bool                     `json:"wifi_enabled"`
	WifiConnected              bool                     `json:"wifi_connected"`
	WifiSSID                   *string                  `json:"wifi_ssid"`
	WifiSignalStrength         SignalStrength           `json:"wifi_signal_strength"`
	WifiCallingEnabled         bool                     `json:"wifi_calling_enabled"`
	WifiCallingMMSOverWifi     bool                     `json:"wifi_calling_mms_over_wifi"`
	DataSaverMode              bool                     `json:"data_saver_mode"`
	VpnEnabledSetting          bool                     `json:"vpn_enabled_setting"`
	VpnConnected               bool                     `json:"vpn_connected"`
	VpnDetails                 *VpnDetails              `json:"vpn_details"`
	AppStatuses                *pyjson.Dict[*AppStatus] `json:"app_statuses"`
}

// DefaultPhone is MockPhoneAttributes() with tau2's defaults.
func DefaultPhone() Phone {
	d := Phone{
		SimCardStatus:              SimActive,
		NetworkSignalStrength:      SignalGood,
		NetworkTechnologyConnected: Tech5G,
		NetworkConnectionStatus:    StatusConnected,
		BatteryLevel:               80,
		DataEnabled:                true,
		NetworkModePreference:      Mode4G5GPreferred,
		ActiveAPNSettings:          DefaultAPNSettings(),
		WifiSignalStrength:         SignalNone,
		AppStatuses:                &pyjson.Dict[*AppStatus]{},
	}
	d.AppStatuses.Set("messaging", &AppStatus{AppName: "messaging",
		Permissions: AppPermissions{SMS: true, Storage: true, Phone: true}})
	d.AppStatuses.Set("browser", &AppStatus{AppName: "browser",
		Permissions: AppPermissions{Network: true, Storage: true}})
	return d
}

// UnmarshalJSON fills absent fields with the defaults; app_statuses, when
// given, replaces the default apps.
func (d *Phone) UnmarshalJSON(b []byte) error {
	type plain Phone
	p := plain(DefaultPhone())
	if err := userDecode(b, &p); err != nil {
		return fmt.Errorf("MockPhoneAttributes: %w", err)
	}
	if p.AppStatuses == nil {
		return fmt.Errorf("MockPhoneAttributes: app_statuses is null")
	}
	for _, k := range p.AppStatuses.Keys() {
		if a, _ := p.AppStatuses.Get(k); a == nil {
			return fmt.Errorf("MockPhoneAttributes: app_statuses[%q] is null", k)
		}
	}
	*d = Phone(p)
	return nil
}

// PaymentRequest is a bill the agent asked the user to pay.
type PaymentRequest struct {
	BillID    string  `json:"bill_id"`
	AmountDue float64 `json:"amount_due"`
	Paid      bool    `json:"paid"`
}

// UnmarshalJSON requires bill_id and amount_due, as the model does.
func (r *PaymentRequest) UnmarshalJSON(b []byte) error {
	type plain struct {
		BillID    *string  `json:"bill_id"`
		AmountDue *float64 `json:"amount_due"`
		Paid      bool     `json:"paid"`
	}
	var p plain
	if err := userDecode(b, &p); err != nil {
		return fmt.Errorf("PaymentRequest: %w", err)
	}
	if p.BillID == nil || p.AmountDue == nil {
		return fmt.Errorf("PaymentRequest: bill_id and amount_due are required")
	}
	*r = PaymentRequest{BillID: *p.BillID, AmountDue: *p.AmountDue, Paid: p.Paid}
	return nil
}

// Surroundings is where the user is and what the carrier's side tells the
// phone (tau2's UserSurroundings; the environment's sync writes
// line_active, roaming_allowed, mobile_data_usage_exceeded and
// payment_request).
type Surroundings struct {
	Name           *string `json:"name"`
	PhoneNumber    *string `json:"phone_number"`
	IsAbroad       bool    `json:"is_abroad"`
	RoamingAllowed bool    `json:"roaming_allowed"`
	// SignalStrength is the signal of each technology where the user is,
	// keyed by NetworkTechnology.
	SignalStrength          *pyjson.Dict[SignalStrength] `json:"signal_strength"`
	MobileDataUsageExceeded bool                         `json:"mobile_data_usage_exceeded"`
	LineActive              bool                         `json:"line_active"`
	PaymentRequest          *PaymentRequest              `json:"payment_request"`
}

// DefaultSurroundings is UserSurroundings() with tau2's defaults.
func DefaultSurroundings() Surroundings {
	s := Surroundings{LineActive: true, SignalStrength: &pyjson.Dict[SignalStrength]{}}
	s.SignalStrength.Set(string(Tech2G), SignalPoor)
	s.SignalStrength.Set(string(Tech3G), SignalFair)
	s.SignalStrength.Set(string(Tech4G), SignalGood)
	s.SignalStrength.Set(string(Tech5G), SignalExcellent)
	return s
}

// UnmarshalJSON fills absent fields with the defaults and checks the
// signal map's keys are technologies.
func (s *Surroundings) UnmarshalJSON(b []byte) error {
	type plain Surroundings
	p := plain(DefaultSurroundings())
	if err := userDecode(b, &p); err != nil {
		return fmt.Errorf("UserSurroundings: %w", err)
	}
	if p.SignalStrength == nil {
		return fmt.Errorf("UserSurroundings: signal_strength is null")
	}
	for _, k := range p.SignalStrength.Keys() {
		var t NetworkTechnology
		if err := t.UnmarshalJSON([]byte(fmt.Sprintf("%q", k))); err != nil {
			return fmt.Errorf("UserSurroundings: signal_strength key: %w", err)
		}
	}
	*s = Surroundings(p)
	return nil
}

// signal is the signal of technology t where the user is (none if the
// map does not say).
func (s *Surroundings) signal(t NetworkTechnology) SignalStrength {
	if v, ok := s.SignalStrength.Get(string(t)); ok {
		return v
	}
	return SignalNone
}

// UserDB is the user's database (tau2's TelecomUserDB).
type UserDB struct {
	Device       Phone        `json:"device"`
	Surroundings Surroundings `json:"surroundings"`
}

// UnmarshalJSON fills absent parts with the defaults.
func (u *UserDB) UnmarshalJSON(b []byte) error {
	type plain UserDB
	p := plain{Device: DefaultPhone(), Surroundings: DefaultSurroundings()}
	if err := userDecode(b, &p); err != nil {
		return fmt.Errorf("TelecomUserDB: %w", err)
	}
	*u = UserDB(p)
	return nil
}

// LoadUserDB decodes user_db.toml's bytes as TelecomUserDB.load does:
// tables keep the file's key order (the apps are listed in it), unknown
// keys are errors.
func LoadUserDB(data []byte) (*UserDB, error) {
	var raw map[string]any
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		return nil, fmt.Errorf("decoding the user database TOML: %w", err)
	}
	doc, err := json.Marshal(userTOMLOrdered(raw, md))
	if err != nil {
		return nil, fmt.Errorf("decoding the user database TOML: %w", err)
	}
	db := &UserDB{}
	if err := userDecode(doc, db); err != nil {
		return nil, fmt.Errorf("validating the user database: %w", err)
	}
	return db, nil
}

// userTOMLOrdered rebuilds a decoded TOML document as nested pyjson.Dicts in
// the document's key order (toml.Decode's maps have none).
func userTOMLOrdered(raw map[string]any, md toml.MetaData) *pyjson.Dict[any] {
	root := &pyjson.Dict[any]{}
	for _, key := range md.Keys() {
		cur, src := root, raw
		for i, part := range key {
			v, ok := src[part]
			if !ok {
				break // inside an array of tables: converted with its parent
			}
			if m, ok := v.(map[string]any); ok {
				next, _ := cur.Get(part)
				nd, ok := next.(*pyjson.Dict[any])
				if !ok {
					nd = &pyjson.Dict[any]{}
					cur.Set(part, nd)
				}
				cur, src = nd, m
				continue
			}
			if i == len(key)-1 && !cur.Has(part) {
				cur.Set(part, userTOMLValue(v))
			}
			break
		}
	}
	return root
}

// userTOMLValue converts a value inside an array (or an array of tables),
// whose tables are written with sorted keys.
func userTOMLValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := &pyjson.Dict[any]{}
		for _, k := range keys {
			d.Set(k, userTOMLValue(x[k]))
		}
		return d
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = userTOMLValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = userTOMLValue(e)
		}
		return out
	}
	return v
}

func userStr(s string) *string { return &s }
