package telecom

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyvalue"
)

// UserTools is the user's toolkit over their phone (tau2's
// TelecomUserTools): the tools the simulated user may call, each
// answering with what the phone's screen shows, and the set-up and
// assertion functions tasks call.
type UserTools struct {
	db *UserDB
	// vpn is what connect_vpn installs as the connection's details. tau2
	// assigns one shared VpnDetails object (a class attribute), so
	// break_vpn's downgrade of the connection to poor performance sticks
	// to every later connect_vpn. Go keeps that sharing per toolkit, not
	// per process: see the package's documentation of the difference.
	vpn *VpnDetails
}

var _ domain.Toolkit = (*UserTools)(nil)

// NewUserTools returns the user's toolkit over db.
func NewUserTools(db *UserDB) *UserTools {
	return &UserTools{db: db, vpn: &VpnDetails{
		ServerAddress:     userStr("192.168.1.1"),
		Protocol:          userStr("OpenVPN"),
		ServerPerformance: PerfExcellent,
	}}
}

// Class is tau2's class name.
func (t *UserTools) Class() string { return "TelecomUserTools" }

// Tools are the user side of the recorded tool schemas.
func (t *UserTools) Tools() []domain.Schema {
	s, err := domain.ParseTools(toolsJSON, "user")
	if err != nil {
		return nil // the embedded file is checked by the golden tests
	}
	return s
}

// DB is the user's database.
func (t *UserTools) DB() any { return t.db }

// UpdateDB merges patch into the database, as update_db does.
func (t *UserTools) UpdateDB(patch json.RawMessage) error { return domain.Merge(t.db, patch) }

func (t *UserTools) phone() *Phone               { return &t.db.Device }
func (t *UserTools) surroundings() *Surroundings { return &t.db.Surroundings }

// Funcs lists the tools, in tau2's order, then the set-up and assertion
// functions.
func (t *UserTools) Funcs() []domain.Func {
	r, w := domain.Read, domain.Write
	req := func(names ...string) []domain.Param {
		ps := make([]domain.Param, len(names))
		for i, n := range names {
			ps[i] = domain.Param{Name: n}
		}
		return ps
	}
	tool := func(name string, typ domain.ToolType, run func() string) domain.Func {
		return domain.Func{Name: name, Tool: true, Type: typ, Mutates: typ == domain.Write,
			Run: func(domain.Args) (any, error) { return run(), nil }}
	}
	toolArgs := func(name string, typ domain.ToolType, params []domain.Param, run func(domain.Args) (any, error)) domain.Func {
		return domain.Func{Name: name, Tool: true, Type: typ, Mutates: typ == domain.Write, Params: params, Run: run}
	}
	fn := func(name string, params []domain.Param, run func(domain.Args) (any, error)) domain.Func {
		return domain.Func{Name: name, Params: params, Run: run}
	}
	fn0 := func(name string, run func() (any, error)) domain.Func {
		return fn(name, nil, func(domain.Args) (any, error) { return run() })
	}
	str := func(run func() string) func() (any, error) {
		return func() (any, error) { return run(), nil }
	}
	boolArg := func(name string, run func(bool) any) func(domain.Args) (any, error) {
		return func(a domain.Args) (any, error) {
			var b bool
			if err := a.Decode(name, &b); err != nil {
				return nil, err
			}
			return run(b), nil
		}
	}
	return []domain.Func{
		tool("check_status_bar", r, t.checkStatusBar),
		tool("check_network_status", r, t.checkNetworkStatus),
		tool("check_network_mode_preference", r, t.checkNetworkModePreference),
		toolArgs("set_network_mode_preference", w, req("mode"), t.setNetworkModePreference),
		tool("run_speed_test", r, t.runSpeedTest),
		tool("toggle_airplane_mode", w, t.toggleAirplaneModeTool),
		tool("check_sim_status", r, t.checkSimStatus),
		tool("reseat_sim_card", w, t.reseatSimCard),
		tool("toggle_data", w, t.toggleDataTool),
		tool("toggle_roaming", w, t.toggleRoamingTool),
		tool("check_data_restriction_status", r, t.checkDataRestrictionStatus),
		tool("toggle_data_saver_mode", w, t.toggleDataSaverModeTool),
		tool("check_apn_settings", r, t.checkAPNSettings),
		toolArgs("set_apn_settings", w, req("apn_settings"), t.setAPNSettings),
		tool("reset_apn_settings", w, t.resetAPNSettings),
		tool("check_wifi_status", r, t.checkWifiStatus),
		tool("toggle_wifi", w, t.toggleWifi),
		tool("check_wifi_calling_status", r, t.checkWifiCallingStatus),
		tool("toggle_wifi_calling", w, t.toggleWifiCallingTool),
		tool("check_vpn_status", r, t.checkVPNStatus),
		tool("connect_vpn", w, t.connectVPNTool),
		tool("disconnect_vpn", w, t.disconnectVPNTool),
		tool("check_installed_apps", r, t.checkInstalledApps),
		toolArgs("check_app_status", r, req("app_name"), t.checkAppStatus),
		toolArgs("check_app_permissions", r, req("app_name"), t.checkAppPermissions),
		toolArgs("grant_app_permission", w, req("app_name", "permission"), t.grantAppPermission),
		tool("can_send_mms", r, t.canSendMMSTool),
		tool("reboot_device", w, t.rebootDevice),
		tool("check_payment_request", r, t.checkPaymentRequest),
		tool("make_payment", w, t.makePayment),

		// Set-up functions of the tasks' initialization_actions.
		fn("set_user_info", req("name", "phone_number"), t.setUserInfo),
		fn("set_user_location", req("abroad"), boolArg("abroad", func(b bool) any {
			t.surroundings().IsAbroad = b
			return nil
		})),
		fn0("simulate_network_search", func() (any, error) { t.simulateNetworkSearch(); return nil, nil }),
		fn0("turn_airplane_mode_on", str(t.turnAirplaneModeOn)),
		fn0("turn_airplane_mode_off", str(t.turnAirplaneModeOff)),
		fn0("unseat_sim_card", str(t.unseatSimCard)),
		fn("lock_sim_card", req("mode"), t.lockSimCard),
		fn0("turn_data_on", str(t.turnDataOn)),
		fn0("turn_data_off", str(t.turnDataOff)),
		fn0("turn_roaming_on", str(t.turnRoamingOn)),
		fn0("turn_roaming_off", str(t.turnRoamingOff)),
		fn0("turn_data_saver_mode_on", str(t.turnDataSaverModeOn)),
		fn0("turn_data_saver_mode_off", str(t.turnDataSaverModeOff)),
		fn0("break_apn_settings", str(t.breakAPNSettings)),
		fn0("break_apn_mms_setting", str(t.breakAPNMMSSetting)),
		fn("set_wifi_calling", []domain.Param{{Name: "enabled"}, {Name: "mms_over_wifi", Optional: true}}, t.setWifiCalling),
		fn0("break_vpn", t.breakVPN),
		fn("remove_app_permission", req("app_name", "permission"), t.removeAppPermission),

		// Assertion functions of the tasks' env_assertions.
		fn("assert_airplane_mode_status", req("expected_status"), boolArg("expected_status", func(b bool) any {
			return t.phone().AirplaneMode == b
		})),
		fn("assert_service_status", req("expected_status"), t.assertServiceStatus),
		fn("assert_mobile_data_status", req("expected_status"), boolArg("expected_status", func(b bool) any {
			return t.mobileDataWorking() == b
		})),
		fn("assert_mobile_roaming_status", req("expected_status"), boolArg("expected_status", func(b bool) any {
			return t.phone().RoamingEnabled == b
		})),
		fn("assert_mobile_data_saver_mode_status", req("expected_status"), boolArg("expected_status", func(b bool) any {
			return t.phone().DataSaverMode == b
		})),
		fn("assert_internet_speed", []domain.Param{{Name: "expected_speed"}, {Name: "expected_desc", Optional: true}}, t.assertInternetSpeed),
		fn0("assert_internet_not_excellent", func() (any, error) {
			_, desc, _ := t.speedTest()
			return strings.ToLower(desc) != "excellent", nil
		}),
		fn("assert_can_send_mms", req("expected_status"), boolArg("expected_status", func(b bool) any {
			return t.canSendMMS() == b
		})),
		fn("assert_mobile_data_usage_exceeded", req("expected_status"), boolArg("expected_status", func(b bool) any {
			return t.surroundings().MobileDataUsageExceeded == b
		})),
	}
}

// withStatusBar appends the status bar line most tools end with.
func (t *UserTools) withStatusBar(s string) string {
	return s + "\nStatus Bar: " + t.statusBar()
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// --- User info and location ---

func (t *UserTools) setUserInfo(a domain.Args) (any, error) {
	var name, phone *string
	if err := a.Decode("name", &name); err != nil {
		return nil, err
	}
	if err := a.Decode("phone_number", &phone); err != nil {
		return nil, err
	}
	t.surroundings().Name, t.surroundings().PhoneNumber = name, phone
	return nil, nil
}

// --- Status bar and network ---

func (t *UserTools) checkStatusBar() string { return "Status Bar: " + t.statusBar() }

func (t *UserTools) statusBar() string {
	p := t.phone()
	var ind []string
	if p.AirplaneMode {
		ind = append(ind, "✈️ Airplane Mode")
	} else {
		switch p.NetworkSignalStrength {
		case SignalPoor:
			ind = append(ind, "📶¹ Poor")
		case SignalFair:
			ind = append(ind, "📶² Fair")
		case SignalGood:
			ind = append(ind, "📶³ Good")
		case SignalExcellent:
			ind = append(ind, "📶⁴ Excellent")
		default:
			ind = append(ind, "📵 No Signal")
		}
		if p.NetworkTechnologyConnected != TechNone {
			ind = append(ind, string(p.NetworkTechnologyConnected))
		}
		if p.DataEnabled && p.NetworkTechnologyConnected != TechNone {
			ind = append(ind, "📱 Data Enabled")
			if p.DataSaverMode {
				ind = append(ind, "🔽 Data Saver")
			}
		} else {
			ind = append(ind, "📵 Data Disabled")
		}
	}
	if p.WifiEnabled && p.WifiConnected {
		if p.WifiSSID != nil && *p.WifiSSID != "" {
			ind = append(ind, "📡 Connected to "+*p.WifiSSID)
		} else {
			ind = append(ind, "📡 Enabled")
		}
	}
	if p.VpnConnected {
		ind = append(ind, "🔒 VPN Connected")
	}
	ind = append(ind, fmt.Sprintf("🔋 %d%%", p.BatteryLevel))
	return strings.Join(ind, " | ")
}

func (t *UserTools) checkNetworkStatus() string {
	p := t.phone()
	lines := []string{
		"Airplane Mode: " + onOff(p.AirplaneMode),
		"SIM Card Status: " + string(t.simStatus()),
		"Cellular Connection: " + string(p.NetworkConnectionStatus),
		"Cellular Signal: " + string(p.NetworkSignalStrength),
		"Cellular Network Type: " + string(p.NetworkTechnologyConnected),
		"Mobile Data Enabled: " + yesNo(p.DataEnabled),
		"Data Roaming Enabled: " + yesNo(p.RoamingEnabled),
		"Wi-Fi Radio: " + onOff(p.WifiEnabled),
		"Wi-Fi Connected: " + yesNo(p.WifiConnected),
	}
	if p.WifiConnected {
		lines = append(lines, "Connected Wi-Fi Network: "+optText(p.WifiSSID))
	}
	return strings.Join(lines, "\n")
}

// optText is str() of an Optional[str]: "None" when unset.
func optText(s *string) string {
	if s == nil {
		return "None"
	}
	return *s
}

func (t *UserTools) checkNetworkModePreference() string {
	return "Network Mode Preference: " + string(t.phone().NetworkModePreference)
}

func (t *UserTools) setNetworkModePreference(a domain.Args) (any, error) {
	mode, err := pyvalue.Arg(a, "mode")
	if err != nil {
		return nil, err
	}
	s, ok := mode.(string)
	if !ok {
		// tau2 stores the value unchecked, then fails reading its .value;
		// the port refuses it without storing it (see the package doc).
		return nil, fmt.Errorf("'%s' object has no attribute 'value'", pyvalue.Type(mode))
	}
	for _, m := range modePreferences() {
		if string(m) == s {
			t.phone().NetworkModePreference = m
			t.simulateNetworkSearch()
			return t.withStatusBar("Preferred Network Mode set to: " + s), nil
		}
	}
	names := make([]string, 0, 4)
	for _, m := range modePreferences() {
		names = append(names, string(m))
	}
	return t.withStatusBar(fmt.Sprintf("Failed to set network mode: '%s' is not a valid option. Please use one of: %s",
		s, strings.Join(names, ", "))), nil
}

// mobileDataWorking is _get_mobile_data_working.
func (t *UserTools) mobileDataWorking() bool {
	p, s := t.phone(), t.surroundings()
	switch {
	case p.AirplaneMode, p.NetworkSignalStrength == SignalNone,
		p.NetworkConnectionStatus == StatusNoService:
		return false
	case s.IsAbroad && (!p.RoamingEnabled || !s.RoamingAllowed):
		return false
	case !p.DataEnabled, s.MobileDataUsageExceeded:
		return false
	}
	return true
}

func (t *UserTools) runSpeedTest() string {
	speed, desc, ok := t.speedTest()
	if !ok {
		return "Speed test failed: " + desc + "."
	}
	advice := map[string]string{
		"Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
		"Poor":      "Connection is slow. Web browsing may be sluggish, streaming difficult.",
		"Fair":      "Connection is okay for web browsing and some standard definition streaming.",
		"Good":      "Connection is good for most activities, including HD streaming.",
		"Excellent": "Connection is very fast.",
	}[desc]
	return fmt.Sprintf("Speed Test Result: %.2f Mbps (%s). %s", speed, desc, advice)
}

// speedTest is _run_speed_test: the simulated speed rounded to 2
// decimals and its description, or ok false and "No Connection".
func (t *UserTools) speedTest() (speed float64, desc string, ok bool) {
	if !t.mobileDataWorking() {
		return 0, "No Connection", false
	}
	p := t.phone()
	base := 1.0
	if p.VpnConnected && p.VpnDetails != nil && p.VpnDetails.ServerPerformance == PerfPoor {
		base = 0.1
	}
	if p.DataSaverMode {
		base *= 0.2
	}
	var lo, hi float64
	switch p.NetworkTechnologyConnected {
	case Tech2G:
		lo, hi = 0.1, 0.4
	case Tech3G:
		lo, hi = 1.0, 5.0
	case Tech4G:
		lo, hi = 10.0, 100.0
	case Tech5G:
		lo, hi = 50.0, 500.0
	}
	factor := map[SignalStrength]float64{SignalPoor: 0.2, SignalFair: 0.5, SignalGood: 0.8, SignalExcellent: 1.0}[p.NetworkSignalStrength]
	speed = pyRound2((lo + hi) / 2.0 * factor * base)
	switch {
	case speed < 1:
		desc = "Very Poor"
	case speed < 5:
		desc = "Poor"
	case speed < 25:
		desc = "Fair"
	case speed < 100:
		desc = "Good"
	default:
		desc = "Excellent"
	}
	return speed, desc, true
}

// pyRound2 is round(x, 2): x correctly rounded to 2 decimals (half to
// even on the exact binary value), as Python and strconv both do.
func pyRound2(x float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 2, 64), 64)
	return f
}

// simulateNetworkSearch is simulate_network_search: the connection the
// SIM, the preference and the surroundings give.
func (t *UserTools) simulateNetworkSearch() {
	p, s := t.phone(), t.surroundings()
	connect := func(tech NetworkTechnology) {
		p.NetworkTechnologyConnected = tech
		p.NetworkSignalStrength = s.signal(tech)
	}
	noService := func() {
		p.NetworkConnectionStatus = StatusNoService
		p.NetworkTechnologyConnected = TechNone
		p.NetworkSignalStrength = SignalNone
	}
	if t.simStatus() == SimActive {
		p.NetworkConnectionStatus = StatusConnected
		switch p.NetworkModePreference {
		case Mode4G5GPreferred:
			if s.signal(Tech5G) == SignalNone {
				connect(Tech4G)
			} else {
				connect(Tech5G)
			}
		case Mode3GOnly:
			connect(Tech3G)
		case Mode2GOnly:
			connect(Tech2G)
		default: // 4g_only, and tau2's fallback
			connect(Tech4G)
		}
	} else {
		noService()
	}
	if p.AirplaneMode || p.ActiveAPNSettings.APNName == APNBroken || !s.LineActive {
		noService()
	}
}

// --- Airplane mode ---

func (t *UserTools) toggleAirplaneModeTool() string {
	on := t.toggleAirplaneMode()
	return t.withStatusBar("Airplane Mode is now " + onOff(on) + ".")
}

func (t *UserTools) toggleAirplaneMode() bool {
	p := t.phone()
	wasOn := p.AirplaneMode
	p.AirplaneMode = !wasOn
	if wasOn {
		p.NetworkConnectionStatus = StatusSearching
		if p.WifiEnabled {
			t.dropWifi()
		}
	} else {
		t.dropWifi()
		if p.VpnConnected {
			t.disconnectVPN()
		}
	}
	t.simulateNetworkSearch()
	return p.AirplaneMode
}

func (t *UserTools) dropWifi() {
	p := t.phone()
	p.WifiConnected = false
	p.WifiSSID = nil
	p.WifiSignalStrength = SignalNone
}

func (t *UserTools) turnAirplaneModeOn() string {
	if !t.toggleAirplaneMode() {
		t.toggleAirplaneMode()
	}
	return "Airplane Mode is now ON."
}

func (t *UserTools) turnAirplaneModeOff() string {
	if t.toggleAirplaneMode() {
		t.toggleAirplaneMode()
	}
	return "Airplane Mode is now OFF."
}

// --- SIM card ---

func (t *UserTools) simStatus() SimStatus {
	if t.phone().SimCardMissing {
		return SimMissing
	}
	return t.phone().SimCardStatus
}

func (t *UserTools) checkSimStatus() string {
	switch s := t.simStatus(); s {
	case SimActive:
		return "Your SIM card is active and working."
	case SimMissing:
		return "No SIM card detected in the phone."
	case SimLockedPIN:
		return "The SIM card is locked with a PIN code."
	case SimLockedPUK:
		return "The SIM card is locked with a PUK code."
	default:
		return "Unknown SIM status: " + string(s)
	}
}

func (t *UserTools) reseatSimCard() string {
	t.phone().SimCardMissing = false
	t.simulateNetworkSearch()
	return t.withStatusBar("SIM card re-seated successfully.")
}

func (t *UserTools) unseatSimCard() string {
	t.phone().SimCardMissing = true
	t.simulateNetworkSearch()
	return "SIM card un-seated successfully."
}

func (t *UserTools) lockSimCard(a domain.Args) (any, error) {
	mode, err := pyvalue.Arg(a, "mode")
	if err != nil {
		return nil, err
	}
	switch mode {
	case "pin":
		t.phone().SimCardStatus = SimLockedPIN
	case "puk":
		t.phone().SimCardStatus = SimLockedPUK
	}
	t.simulateNetworkSearch()
	return fmt.Sprintf("SIM card locked successfully in %s mode.", pyvalue.Str(mode)), nil
}

// --- Mobile data and roaming ---

func (t *UserTools) toggleDataTool() string {
	return t.withStatusBar("Mobile Data is now " + onOff(t.toggleData()) + ".")
}

func (t *UserTools) toggleData() bool {
	p := t.phone()
	p.DataEnabled = !p.DataEnabled
	t.simulateNetworkSearch()
	return p.DataEnabled
}

func (t *UserTools) turnDataOn() string {
	t.phone().DataEnabled = true
	return "Data connection restored."
}

func (t *UserTools) turnDataOff() string {
	if t.toggleData() {
		t.toggleData()
	}
	return "Data connection broken."
}

func (t *UserTools) toggleRoamingTool() string {
	return t.withStatusBar("Data Roaming is now " + onOff(t.toggleRoaming()) + ".")
}

func (t *UserTools) toggleRoaming() bool {
	p := t.phone()
	p.RoamingEnabled = !p.RoamingEnabled
	t.simulateNetworkSearch()
	return p.RoamingEnabled
}

func (t *UserTools) turnRoamingOn() string {
	if !t.toggleRoaming() {
		t.toggleRoaming()
	}
	return "Data Roaming is now ON."
}

func (t *UserTools) turnRoamingOff() string {
	if t.toggleRoaming() {
		t.toggleRoaming()
	}
	return "Data Roaming is now OFF."
}

func (t *UserTools) checkDataRestrictionStatus() string {
	if t.phone().DataSaverMode {
		return "Data Saver mode is ON (limits data usage)."
	}
	return "Data Saver mode is OFF."
}

func (t *UserTools) toggleDataSaverModeTool() string {
	return t.withStatusBar("Data Saver Mode is now " + onOff(t.toggleDataSaverMode()) + ".")
}

func (t *UserTools) toggleDataSaverMode() bool {
	p := t.phone()
	p.DataSaverMode = !p.DataSaverMode
	return p.DataSaverMode
}

func (t *UserTools) turnDataSaverModeOn() string {
	if !t.toggleDataSaverMode() {
		t.toggleDataSaverMode()
	}
	return "Data Saver Mode is now ON."
}

func (t *UserTools) turnDataSaverModeOff() string {
	if t.toggleDataSaverMode() {
		t.toggleDataSaverMode()
	}
	return "Data Saver Mode is now OFF."
}
