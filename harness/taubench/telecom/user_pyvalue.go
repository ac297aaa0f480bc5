package telecom

import (
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// tau2's user tools take their arguments unvalidated: a value of the
// wrong JSON type flows into f-strings, dict look-ups and pydantic models
// as Python sees it (pyvalue's view). These helpers are the pydantic
// validation the user tools apply to such values.

// validateAPNSettings is APNSettings(**d): pydantic's lax validation of
// each field, defaults for the absent ones, extra fields refused.
func validateAPNSettings(d *pyjson.Dict[any]) (APNSettings, error) {
	out := DefaultAPNSettings()
	ve := pyvalue.ValidationError{Model: "APNSettings"}
	optString := func(name string, dst **string) {
		if v, ok := d.Get(name); ok {
			*dst = nil
			if v != nil {
				s := ve.Str(name, v)
				*dst = &s
			}
		}
	}
	if v, ok := d.Get("apn_name"); ok {
		switch s, _ := v.(string); APNName(s) {
		case APNInternet, APNBroken:
			out.APNName = APNName(s)
		default:
			ve.Add("apn_name", "enum", "Input should be 'internet' or 'broken'", v)
		}
	}
	if v, ok := d.Get("reset_at_reboot"); ok {
		out.ResetAtReboot = ve.Bool("reset_at_reboot", v)
	}
	optString("mms_apn", &out.MMSAPN)
	optString("mmsc_url", &out.MMSCURL)
	optString("mms_proxy", &out.MMSProxy)
	if v, ok := d.Get("mms_port"); ok {
		out.MMSPort = nil
		if v != nil {
			n := ve.Int("mms_port", v)
			out.MMSPort = &n
		}
	}
	known := map[string]bool{"apn_name": true, "reset_at_reboot": true, "mms_apn": true,
		"mmsc_url": true, "mms_proxy": true, "mms_port": true}
	for _, k := range d.Keys() {
		if !known[k] {
			v, _ := d.Get(k)
			ve.Add(k, "extra_forbidden", "Extra inputs are not permitted", v)
		}
	}
	if err := ve.Err(); err != nil {
		return APNSettings{}, err
	}
	return out, nil
}
