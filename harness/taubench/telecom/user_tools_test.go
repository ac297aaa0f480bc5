package telecom

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"evals.si/harness/taubench/domain"
)

// testUserDB is tau2's user_db.toml, so the unit tests need no data
// directory.
const testUserDB = `[device]
sim_card_status = "active"
sim_card_missing = false
airplane_mode = false
network_signal_strength = "good"
network_technology_connected = "5G"
network_connection_status = "connected"
battery_level = 80
data_enabled = true
roaming_enabled = false
network_mode_preference = "4g_5g_preferred"
wifi_enabled = false
wifi_connected = false
wifi_signal_strength = "none"
wifi_calling_enabled = false
wifi_calling_mms_over_wifi = false
data_saver_mode = false
vpn_enabled_setting = false
vpn_connected = false

[device.active_apn_settings]
apn_name = "internet"
mms_apn = "mms"
mmsc_url = "http://mms.carrier.com/mms/wapenc"

[device.app_statuses.messaging]
app_name = "messaging"

[device.app_statuses.messaging.permissions]
sms = true
storage = true
phone = true
network = false

[device.app_statuses.browser]
app_name = "browser"

[device.app_statuses.browser.permissions]
sms = false
storage = true
phone = false
network = true
`

func newTestUserTools(t *testing.T) *UserTools {
	t.Helper()
	db, err := LoadUserDB([]byte(testUserDB))
	if err != nil {
		t.Fatal(err)
	}
	return NewUserTools(db)
}

// userCall is one function call of a test: name and its JSON arguments.
type userCall struct {
	name string
	args string
}

func runUser(t *testing.T, tk domain.Toolkit, c userCall) (any, error) {
	t.Helper()
	var a domain.Args
	if c.args != "" {
		if err := json.Unmarshal([]byte(c.args), &a); err != nil {
			t.Fatalf("%s: bad test arguments %s: %v", c.name, c.args, err)
		}
	}
	return domain.CallFunc(tk, c.name, a)
}

// TestUserFuncs checks the set-up and assertion functions the golden
// traces reach only through the tasks' own arguments; the texts are what
// tau2 returns or raises for the same calls.
func TestUserFuncs(t *testing.T) {
	tests := []struct {
		name    string
		before  []userCall
		call    userCall
		want    any
		wantErr string
	}{
		{name: "service status, not a status", call: userCall{"assert_service_status", `{"expected_status": "bogus"}`},
			wantErr: "'bogus' is not a valid NetworkStatus"},
		{name: "service status, a number", call: userCall{"assert_service_status", `{"expected_status": 5}`},
			wantErr: "5 is not a valid NetworkStatus"},
		{name: "service status", call: userCall{"assert_service_status", `{"expected_status": "connected"}`}, want: true},
		{name: "speed, a string", call: userCall{"assert_internet_speed", `{"expected_speed": "x"}`},
			wantErr: "'>=' not supported between instances of 'float' and 'str'"},
		{name: "speed, null", call: userCall{"assert_internet_speed", `{"expected_speed": null}`},
			wantErr: "'>=' not supported between instances of 'float' and 'NoneType'"},
		{name: "speed, 5G good is 220", call: userCall{"assert_internet_speed", `{"expected_speed": 220}`}, want: true},
		{name: "speed, above", call: userCall{"assert_internet_speed", `{"expected_speed": 220.01}`}, want: false},
		{name: "speed, description any case", call: userCall{"assert_internet_speed", `{"expected_speed": 1, "expected_desc": "EXCELLENT"}`}, want: true},
		{name: "speed, no connection", before: []userCall{{"turn_data_off", ""}},
			call: userCall{"assert_internet_speed", `{"expected_speed": 0, "expected_desc": "no connection"}`}, want: true},
		{name: "not excellent", call: userCall{"assert_internet_not_excellent", ""}, want: false},
		{name: "not excellent, data saver", before: []userCall{{"turn_data_saver_mode_on", ""}},
			call: userCall{"assert_internet_not_excellent", ""}, want: true},
		{name: "lock puk", before: []userCall{{"lock_sim_card", `{"mode": "puk"}`}},
			call: userCall{"check_sim_status", ""}, want: "The SIM card is locked with a PUK code."},
		{name: "lock, other mode", call: userCall{"lock_sim_card", `{"mode": "x"}`}, want: "SIM card locked successfully in x mode."},
		{name: "remove permission", call: userCall{"remove_app_permission", `{"app_name": "messaging", "permission": "SMS"}`},
			want: []any{true, "Permission 'sms' removed from app 'messaging'."}},
		{name: "remove permission, no app", call: userCall{"remove_app_permission", `{"app_name": "camera", "permission": "sms"}`},
			want: []any{false, "App 'camera' not found. Cannot remove permission."}},
		{name: "remove permission, unknown", call: userCall{"remove_app_permission", `{"app_name": "messaging", "permission": "gps"}`},
			want: []any{false, "Permission 'gps' not tracked for app 'messaging'."}},
		{name: "wifi calling off", call: userCall{"set_wifi_calling", `{"enabled": false}`}, want: "Wi-Fi Calling is now OFF."},
		{name: "wifi calling, mms off", call: userCall{"set_wifi_calling", `{"enabled": true, "mms_over_wifi": false}`},
			want: "Wi-Fi Calling is now ON.\nMMS over Wi-Fi is now OFF."},
		{name: "data on", before: []userCall{{"turn_data_off", ""}}, call: userCall{"turn_data_on", ""}, want: "Data connection restored."},
		{name: "airplane on", before: []userCall{{"turn_airplane_mode_on", ""}},
			call: userCall{"assert_airplane_mode_status", `{"expected_status": true}`}, want: true},
		{name: "airplane off twice", before: []userCall{{"turn_airplane_mode_off", ""}},
			call: userCall{"turn_airplane_mode_off", ""}, want: "Airplane Mode is now OFF."},
		{name: "data saver off", before: []userCall{{"turn_data_saver_mode_on", ""}, {"turn_data_saver_mode_off", ""}},
			call: userCall{"assert_mobile_data_saver_mode_status", `{"expected_status": false}`}, want: true},
		{name: "roaming on", before: []userCall{{"turn_roaming_on", ""}, {"turn_roaming_on", ""}},
			call: userCall{"assert_mobile_roaming_status", `{"expected_status": true}`}, want: true},
		{name: "usage exceeded", call: userCall{"assert_mobile_data_usage_exceeded", `{"expected_status": false}`}, want: true},
		{name: "break vpn", call: userCall{"break_vpn", ""}, want: "VPN connection broken."},
		{name: "user info", before: []userCall{{"set_user_info", `{"name": "A", "phone_number": "555"}`}},
			call: userCall{"check_payment_request", ""}, want: "No payment request has been made."},
		{name: "missing argument", call: userCall{"set_user_location", `{}`},
			wantErr: "TelecomUserTools.set_user_location() missing 1 required positional argument: 'abroad'"},
		{name: "no such function", call: userCall{"fly", ""}, wantErr: "'TelecomUserTools' object has no attribute 'fly'"},
		// tau2 stores these unchecked and fails afterwards; the port fails
		// alike but keeps the database valid.
		{name: "mode, a number", call: userCall{"set_network_mode_preference", `{"mode": 5}`},
			wantErr: "'int' object has no attribute 'value'"},
		{name: "apn settings, a string", call: userCall{"set_apn_settings", `{"apn_settings": "internet"}`},
			wantErr: "'str' object has no attribute 'apn_name'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := newTestUserTools(t)
			for _, c := range tc.before {
				if _, err := runUser(t, tk, c); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
			}
			got, err := runUser(t, tk, tc.call)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("got %v, %v; want the error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestBreakVPNWithoutDetails(t *testing.T) {
	tk := newTestUserTools(t)
	tk.db.Device.VpnConnected = true
	_, err := runUser(t, tk, userCall{"break_vpn", ""})
	if want := "'NoneType' object has no attribute 'server_performance'"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// TestVPNDetailsShared: connect_vpn installs the toolkit's one default
// details object, so break_vpn's poor performance outlives a reconnect
// (as in tau2), while a fresh toolkit starts excellent (tau2's class
// attribute would carry the damage over to every later environment).
func TestVPNDetailsShared(t *testing.T) {
	const excellent = "VPN is ON and connected. Details: {'server_address': '192.168.1.1', 'protocol': 'OpenVPN', 'server_performance': <PerformanceLevel.EXCELLENT: 'excellent'>}"
	const poor = "VPN is ON and connected. Details: {'server_address': '192.168.1.1', 'protocol': 'OpenVPN', 'server_performance': <PerformanceLevel.POOR: 'poor'>}"
	tk := newTestUserTools(t)
	steps := []struct {
		c    userCall
		want string
	}{
		{userCall{"connect_vpn", ""}, ""},
		{userCall{"check_vpn_status", ""}, excellent},
		{userCall{"break_vpn", ""}, "VPN connection broken."},
		{userCall{"disconnect_vpn", ""}, ""},
		{userCall{"connect_vpn", ""}, ""},
		{userCall{"check_vpn_status", ""}, poor},
	}
	for i, s := range steps {
		got, err := runUser(t, tk, s.c)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, s.c.name, err)
		}
		if s.want != "" && got != s.want {
			t.Fatalf("step %d %s: got %q, want %q", i, s.c.name, got, s.want)
		}
	}
	got, _ := runUser(t, newTestUserTools(t), userCall{"connect_vpn", ""})
	if !strings.HasPrefix(got.(string), "VPN connected successfully.") {
		t.Fatalf("fresh toolkit: %q", got)
	}
	if got, _ := runUser(t, newTestUserTools(t), userCall{"break_vpn", ""}); got != "VPN connection broken." {
		t.Fatalf("fresh toolkit: %q", got)
	}
}

func TestLoadUserDB(t *testing.T) {
	db, err := LoadUserDB([]byte(testUserDB))
	if err != nil {
		t.Fatal(err)
	}
	if got := db.Device.AppStatuses.Keys(); !reflect.DeepEqual(got, []string{"messaging", "browser"}) {
		t.Errorf("apps in the file's order: got %v", got)
	}
	if got := db.Surroundings.SignalStrength.Keys(); !reflect.DeepEqual(got, []string{"2G", "3G", "4G", "5G"}) {
		t.Errorf("default surroundings: got %v", got)
	}
	if !db.Surroundings.LineActive || db.Device.ActiveAPNSettings.MMSProxy != nil || db.Device.WifiSSID != nil {
		t.Errorf("defaults not applied: %+v", db)
	}
	bad := []struct{ name, toml, want string }{
		{"unknown key", testUserDB + "\n[surroundings]\nweather = \"rain\"\n", `unknown field "weather"`},
		{"unknown device key", strings.Replace(testUserDB, "battery_level", "battery", 1), `unknown field "battery"`},
		{"bad enum", strings.Replace(testUserDB, `"4g_5g_preferred"`, `"6g"`, 1), `"6g" is not one of`},
		{"app without name", strings.Replace(testUserDB, "app_name = \"browser\"\n", "", 1), "app_name is required"},
		{"not TOML", "[device", "decoding the user database TOML"},
	}
	for _, b := range bad {
		if _, err := LoadUserDB([]byte(b.toml)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: got %v, want an error containing %q", b.name, err, b.want)
		}
	}
}

func TestUserUpdateDB(t *testing.T) {
	tk := newTestUserTools(t)
	patch := `{"device": {"app_statuses": {"messaging": {"permissions": {"sms": false}}}, "active_apn_settings": {"mms_port": 80}},
		"surroundings": {"payment_request": {"bill_id": "B1", "amount_due": 25}}}`
	if err := tk.UpdateDB(json.RawMessage(patch)); err != nil {
		t.Fatal(err)
	}
	got, _ := runUser(t, tk, userCall{"check_app_permissions", `{"app_name": "messaging"}`})
	if want := "App 'messaging' has permission for: storage, phone."; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	got, _ = runUser(t, tk, userCall{"check_payment_request", ""})
	if want := "You have a payment request for bill B1 of 25.0 USD."; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := tk.UpdateDB(json.RawMessage(`{"device": {"wifi": true}}`)); err == nil {
		t.Error("an unknown field was accepted")
	}
}
