package telecom

import (
	"fmt"
	"math/big"
	"strings"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// The user's tools over APN, Wi-Fi, VPN, apps, MMS, the device itself and
// payments, and the assertion functions that need more than a field.

// --- APN settings ---

func (t *UserTools) checkAPNSettings() string {
	s := t.phone().ActiveAPNSettings
	mmsc := "Not Set"
	if s.MMSCURL != nil && *s.MMSCURL != "" {
		mmsc = *s.MMSCURL
	}
	return fmt.Sprintf("Current APN Name: %s\nMMSC URL (for picture messages): %s\n(These are technical settings, usually best left unchanged.)",
		s.APNName, mmsc)
}

func (t *UserTools) setAPNSettings(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "apn_settings")
	if err != nil {
		return nil, err
	}
	d, ok := v.(*pyjson.Dict[any])
	if !ok {
		// tau2 stores a non-dict unchecked as the settings and then fails
		// reading its .apn_name; the port refuses it without storing it.
		return nil, fmt.Errorf("'%s' object has no attribute 'apn_name'", pyvalue.Type(v))
	}
	s, err := validateAPNSettings(d)
	if err != nil {
		return nil, err
	}
	t.phone().ActiveAPNSettings = s
	t.simulateNetworkSearch()
	return t.withStatusBar("APN settings set to: " + string(s.APNName)), nil
}

func (t *UserTools) resetAPNSettings() string {
	t.phone().ActiveAPNSettings.ResetAtReboot = true
	t.simulateNetworkSearch()
	return t.withStatusBar("APN settings will reset at reboot.")
}

func (t *UserTools) breakAPNSettings() string {
	t.phone().ActiveAPNSettings.APNName = APNBroken
	t.simulateNetworkSearch()
	return "APN settings broken. Please call reset_apn_settings() to fix."
}

func (t *UserTools) breakAPNMMSSetting() string {
	t.phone().ActiveAPNSettings.MMSCURL = nil
	return "APN MMS setting broken. Please call reset_apn_settings() to fix."
}

// --- Wi-Fi and Wi-Fi calling ---

func (t *UserTools) checkWifiStatus() string {
	p := t.phone()
	switch {
	case !p.WifiEnabled:
		return "Wi-Fi is turned OFF."
	case p.WifiConnected:
		return fmt.Sprintf("Wi-Fi is ON and connected to '%s'. Signal strength: %s.", optText(p.WifiSSID), p.WifiSignalStrength)
	}
	return "Wi-Fi is ON but not connected to any network."
}

func (t *UserTools) toggleWifi() string {
	p := t.phone()
	if p.AirplaneMode {
		return t.withStatusBar("Cannot change Wi-Fi settings while Airplane Mode is ON.")
	}
	p.WifiEnabled = !p.WifiEnabled
	if !p.WifiEnabled {
		t.dropWifi()
	}
	return t.withStatusBar("Wi-Fi is now " + onOff(p.WifiEnabled) + ".")
}

func (t *UserTools) checkWifiCallingStatus() string {
	return "Wi-Fi Calling is currently turned " + onOff(t.phone().WifiCallingEnabled) + "."
}

func (t *UserTools) toggleWifiCallingTool() string {
	p := t.phone()
	p.WifiCallingEnabled = !p.WifiCallingEnabled
	return t.withStatusBar("Wi-Fi Calling is now " + onOff(p.WifiCallingEnabled) + ".")
}

func (t *UserTools) setWifiCalling(a domain.Args) (any, error) {
	var enabled bool
	var mms *bool
	if err := a.Decode("enabled", &enabled); err != nil {
		return nil, err
	}
	if err := a.Decode("mms_over_wifi", &mms); err != nil {
		return nil, err
	}
	p := t.phone()
	p.WifiCallingEnabled = enabled
	msg := "Wi-Fi Calling is now " + onOff(enabled) + "."
	if mms != nil {
		p.WifiCallingMMSOverWifi = *mms
		msg += "\nMMS over Wi-Fi is now " + onOff(*mms) + "."
	}
	return msg, nil
}

// --- VPN ---

func (t *UserTools) checkVPNStatus() string {
	p := t.phone()
	switch {
	case p.VpnConnected && p.VpnDetails != nil:
		d := p.VpnDetails
		// str() of model_dump(): a dict whose enum member shows as its repr.
		perf := string(d.ServerPerformance)
		return fmt.Sprintf("VPN is ON and connected. Details: {'server_address': %s, 'protocol': %s, 'server_performance': <PerformanceLevel.%s: %s>}",
			optRepr(d.ServerAddress), optRepr(d.Protocol), strings.ToUpper(perf), pyvalue.StrRepr(perf))
	case p.VpnConnected:
		return "VPN is ON and connected (no specific details available)."
	case p.VpnEnabledSetting:
		return "VPN is turned ON in settings, but currently not connected."
	}
	return "VPN is turned OFF."
}

// optRepr is repr() of an Optional[str].
func optRepr(s *string) string {
	if s == nil {
		return "None"
	}
	return pyvalue.StrRepr(*s)
}

func (t *UserTools) connectVPNTool() string {
	if !t.connectVPN() {
		return "VPN already connected."
	}
	return t.withStatusBar("VPN connected successfully.")
}

// connectVPN connects with the shared default details; false when a VPN
// was already connected.
func (t *UserTools) connectVPN() bool {
	p := t.phone()
	if p.VpnConnected {
		return false
	}
	p.VpnConnected = true
	p.VpnDetails = t.vpn
	return true
}

func (t *UserTools) disconnectVPNTool() string {
	if !t.disconnectVPN() {
		return t.withStatusBar("No active VPN connection to disconnect.")
	}
	return t.withStatusBar("VPN disconnected successfully.")
}

func (t *UserTools) disconnectVPN() bool {
	p := t.phone()
	if !p.VpnConnected {
		return false
	}
	p.VpnConnected = false
	p.VpnDetails = nil
	return true
}

func (t *UserTools) breakVPN() (any, error) {
	t.connectVPN()
	d := t.phone().VpnDetails
	if d == nil {
		return nil, fmt.Errorf("'NoneType' object has no attribute 'server_performance'")
	}
	d.ServerPerformance = PerfPoor
	return "VPN connection broken.", nil
}

// --- Apps ---

func (t *UserTools) checkInstalledApps() string {
	return "The following apps are installed on the phone: " + strings.Join(t.phone().AppStatuses.Keys(), ", ")
}

// app looks up the app called name (any JSON value, as Python's dict.get
// sees it).
func (t *UserTools) app(name any) (*AppStatus, error) {
	if err := pyvalue.Unhashable(name); err != nil {
		return nil, err
	}
	s, ok := name.(string)
	if !ok {
		return nil, nil
	}
	a, _ := t.phone().AppStatuses.Get(s)
	return a, nil
}

func (t *UserTools) checkAppStatus(a domain.Args) (any, error) {
	name, err := pyvalue.Arg(a, "app_name")
	if err != nil {
		return nil, err
	}
	app, err := t.app(name)
	if err != nil {
		return nil, err
	}
	if app == nil {
		return fmt.Sprintf("App '%s' not found on this phone.", pyvalue.Str(name)), nil
	}
	lines := []string{"Status for App: " + pyvalue.Str(name)}
	if perms := app.Permissions.granted(); len(perms) == 0 {
		lines = append(lines, " - Permissions: None granted.")
	} else {
		lines = append(lines, " - Permissions Granted:")
		for _, p := range perms {
			lines = append(lines, "   - "+p)
		}
	}
	return strings.Join(lines, "\n"), nil
}

func (t *UserTools) checkAppPermissions(a domain.Args) (any, error) {
	name, err := pyvalue.Arg(a, "app_name")
	if err != nil {
		return nil, err
	}
	app, err := t.app(name)
	if err != nil {
		return nil, err
	}
	if app == nil {
		return fmt.Sprintf("App '%s' not found on this phone.", pyvalue.Str(name)), nil
	}
	perms := app.Permissions.granted()
	if len(perms) == 0 {
		return fmt.Sprintf("App '%s' currently has no permissions granted.", pyvalue.Str(name)), nil
	}
	return fmt.Sprintf("App '%s' has permission for: %s.", pyvalue.Str(name), strings.Join(perms, ", ")), nil
}

// appPermissionArgs reads app_name and permission as tau2 does: the app
// looked up first, then the permission lowercased.
func (t *UserTools) appPermissionArgs(a domain.Args) (app *AppStatus, name any, perm string, err error) {
	if name, err = pyvalue.Arg(a, "app_name"); err != nil {
		return nil, nil, "", err
	}
	pv, err := pyvalue.Arg(a, "permission")
	if err != nil {
		return nil, nil, "", err
	}
	if app, err = t.app(name); err != nil {
		return nil, nil, "", err
	}
	s, ok := pv.(string)
	if !ok {
		return nil, nil, "", fmt.Errorf("'%s' object has no attribute 'lower'", pyvalue.Type(pv))
	}
	return app, name, strings.ToLower(s), nil
}

func (t *UserTools) grantAppPermission(a domain.Args) (any, error) {
	app, name, perm, err := t.appPermissionArgs(a)
	if err != nil {
		return nil, err
	}
	var msg string
	switch {
	case app == nil:
		msg = fmt.Sprintf("Error. App '%s' not found. Cannot grant permission.", pyvalue.Str(name))
	case app.Permissions.field(perm) == nil:
		quoted := make([]string, 0, 4)
		for _, n := range permissionNames() {
			quoted = append(quoted, "'"+n+"'")
		}
		msg = fmt.Sprintf("Error. Permission '%s' not tracked for app '%s', available permissions: [%s]",
			perm, pyvalue.Str(name), strings.Join(quoted, ", "))
	default:
		*app.Permissions.field(perm) = true
		msg = fmt.Sprintf("Success. Permission '%s' granted to app '%s'.", perm, pyvalue.Str(name))
	}
	return t.withStatusBar(msg), nil
}

// removeAppPermission returns tau2's (success, message) tuple.
func (t *UserTools) removeAppPermission(a domain.Args) (any, error) {
	app, name, perm, err := t.appPermissionArgs(a)
	if err != nil {
		return nil, err
	}
	switch {
	case app == nil:
		return []any{false, fmt.Sprintf("App '%s' not found. Cannot remove permission.", pyvalue.Str(name))}, nil
	case app.Permissions.field(perm) == nil:
		return []any{false, fmt.Sprintf("Permission '%s' not tracked for app '%s'.", perm, pyvalue.Str(name))}, nil
	}
	*app.Permissions.field(perm) = false
	return []any{true, fmt.Sprintf("Permission '%s' removed from app '%s'.", perm, pyvalue.Str(name))}, nil
}

// --- MMS ---

func (t *UserTools) canSendMMSTool() string {
	if t.canSendMMS() {
		return "Your messaging app can send MMS messages."
	}
	return "Your messaging app cannot send MMS messages."
}

func (t *UserTools) canSendMMS() bool {
	p := t.phone()
	if !t.mobileDataWorking() || p.NetworkTechnologyConnected == Tech2G {
		return false
	}
	// Carriers here do not support MMS over Wi-Fi calling.
	if p.WifiCallingEnabled && p.WifiCallingMMSOverWifi {
		return false
	}
	if p.ActiveAPNSettings.MMSCURL == nil {
		return false
	}
	msg, ok := p.AppStatuses.Get("messaging")
	return ok && msg.Permissions.Storage && msg.Permissions.SMS
}

// --- Device ---

func (t *UserTools) rebootDevice() string {
	var lines []string
	p := t.phone()
	if p.ActiveAPNSettings.ResetAtReboot {
		lines = append(lines, "Resetting APN settings...")
		p.ActiveAPNSettings = DefaultAPNSettings()
	}
	lines = append(lines, "Restarting network services...")
	p.NetworkConnectionStatus = StatusSearching
	t.simulateNetworkSearch()
	return t.withStatusBar(strings.Join(lines, "\n"))
}

// --- Payments ---

func (t *UserTools) checkPaymentRequest() string {
	r := t.surroundings().PaymentRequest
	if r == nil {
		return "No payment request has been made."
	}
	return fmt.Sprintf("You have a payment request for bill %s of %s USD.", r.BillID, pyjson.FloatRepr(r.AmountDue))
}

func (t *UserTools) makePayment() string {
	r := t.surroundings().PaymentRequest
	if r == nil {
		return "You do not have a payment request."
	}
	r.Paid = true
	return fmt.Sprintf("Payment of %s USD has been made for bill %s.", pyjson.FloatRepr(r.AmountDue), r.BillID)
}

// --- Assertions ---

func (t *UserTools) assertServiceStatus(a domain.Args) (any, error) {
	v, err := pyvalue.Arg(a, "expected_status")
	if err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		for _, st := range networkStatuses() {
			if string(st) == s {
				return t.phone().NetworkConnectionStatus == st, nil
			}
		}
	}
	return nil, fmt.Errorf("%s is not a valid NetworkStatus", pyvalue.Repr(v))
}

func (t *UserTools) assertInternetSpeed(a domain.Args) (any, error) {
	want, err := pyvalue.Arg(a, "expected_speed")
	if err != nil {
		return nil, err
	}
	var min float64
	switch x := want.(type) {
	case *big.Int:
		min, _ = new(big.Float).SetInt(x).Float64()
	case float64:
		min = x
	case bool:
		if x {
			min = 1
		}
	default:
		return nil, fmt.Errorf("'>=' not supported between instances of 'float' and '%s'", pyvalue.Type(want))
	}
	var desc *string
	if err := a.Decode("expected_desc", &desc); err != nil {
		return nil, err
	}
	speed, got, _ := t.speedTest()
	if desc == nil {
		return speed >= min, nil
	}
	return speed >= min && strings.EqualFold(got, *desc), nil
}
