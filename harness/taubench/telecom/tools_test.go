package telecom

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/tau2"
)

// TestEnvFunctions replays what tau2's assistant-side set-up and
// assertion functions did (testdata/env_functions.py recorded it; the
// golden traces reach them only through the tasks), with the draft bill id
// tau2's uuid4 was fixed to; and what update_db made of some patches.
func TestEnvFunctions(t *testing.T) {
	d := loadBenchData(t)
	raw, err := os.ReadFile(filepath.Join("testdata", "env_functions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Update      []json.RawMessage `json:"update"`
		UpdateError string            `json:"update_error"`
		Calls       []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"calls"`
		Results []struct {
			Result *string `json:"result"`
			Error  *string `json:"error"`
		} `json:"results"`
		DBHash string `json:"db_hash"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		w, err := tau2.NewWorld(d)
		if err != nil {
			t.Fatal(err)
		}
		w.Env().Agent().(*Tools).newBillID = func() string { return "B12345678" }
		for _, patch := range c.Update {
			err := w.Env().Agent().UpdateDB(patch)
			if (err != nil) != (c.UpdateError != "") {
				t.Errorf("update_db(%s): %v; tau2: %q", patch, err, c.UpdateError)
			}
			if err != nil {
				break
			}
		}
		for i, call := range c.Calls {
			res, err := w.RunEnvFunction(tau2.EnvFunctionCall{EnvType: "assistant", FuncName: call.Name, Arguments: call.Arguments})
			want := c.Results[i]
			switch {
			case want.Error != nil:
				if err == nil || err.Error() != *want.Error {
					t.Errorf("%s(%s): got %v, %v; tau2 raised %q", call.Name, call.Arguments, res, err, *want.Error)
				}
			case err != nil:
				t.Errorf("%s(%s): %v; tau2 returned %s", call.Name, call.Arguments, err, *want.Result)
			default:
				got, err := pyjson.ToolResult(res)
				if err != nil || got != *want.Result {
					t.Errorf("%s(%s):\n got %s (%v)\nwant %s", call.Name, call.Arguments, got, err, *want.Result)
				}
			}
		}
		if h, _, _ := w.Hashes(); h != c.DBHash {
			t.Errorf("updates %s, calls %s: database hash %s, tau2's %s", c.Update, c.Calls, h, c.DBHash)
		}
	}
}

func TestArgStr(t *testing.T) {
	for _, c := range []struct{ json, str, kind string }{
		{`"C1001"`, "C1001", "str"},
		{`1001`, "1001", "int"},
		{`-0`, "0", "int"},
		{`12345678901234567890123`, "12345678901234567890123", "int"},
		{`10.5`, "10.5", "float"},
		{`1e100`, "1e+100", "float"},
		{`2E0`, "2.0", "float"},
		{`1e400`, "inf", "float"},
		{`true`, "True", "bool"},
		{`null`, "None", "NoneType"},
		{`["C1001", 2, null, false, 1.0, "it's"]`, `['C1001', 2, None, False, 1.0, "it's"]`, "list"},
		{`{"id": "C1001", "n": [1, {"k": "v"}]}`, `{'id': 'C1001', 'n': [1, {'k': 'v'}]}`, "dict"},
		{`{"b": 1, "a": 2}`, `{'b': 1, 'a': 2}`, "dict"},
		{`["a\"b'c", "\n\t\u0001\u00a0é☃😀\\"]`, `['a"b\'c', '\n\t\x01\xa0é☃😀\\']`, "list"},
		{`[]`, "[]", "list"},
	} {
		v, err := parseArg(json.RawMessage(c.json))
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		if v.String() != c.str || v.kind.typeName() != c.kind {
			t.Errorf("%s: str %s (%s), want %s (%s)", c.json, v, v.kind.typeName(), c.str, c.kind)
		}
	}
}

func TestTruthy(t *testing.T) {
	for js, want := range map[string]bool{
		`true`: true, `false`: false, `0`: false, `0.0`: false, `2`: true, `""`: false, `"x"`: true,
		`null`: false, `[]`: false, `[0]`: true, `{}`: false, `{"a": 1}`: true,
	} {
		v, _ := parseArg(json.RawMessage(js))
		if v.truthy() != want {
			t.Errorf("bool(%s) = %v, want %v", js, v.truthy(), want)
		}
	}
}

func TestSliceBound(t *testing.T) {
	for _, c := range []struct {
		limit float64
		n     int
		want  int
	}{{12, 3, 3}, {2, 3, 2}, {0, 3, 0}, {-1, 3, 2}, {-3, 3, 0}, {-5, 3, 0}, {1e30, 3, 3}, {-1e30, 3, 0}} {
		if got := sliceBound(argValue{kind: kindInt, num: c.limit}, c.n); got != c.want {
			t.Errorf("[:%v] of %d: %d, want %d", c.limit, c.n, got, c.want)
		}
	}
}

func TestDateTimes(t *testing.T) {
	for _, c := range []struct{ in, str, iso string }{
		{"2025-01-20T14:30:00", "2025-01-20 14:30:00", "2025-01-20T14:30:00"},
		{"2025-01-20 14:30", "2025-01-20 14:30:00", "2025-01-20T14:30:00"},
		{"2025-01-20", "2025-01-20 00:00:00", "2025-01-20T00:00:00"},
		{"2025-01-20T14:30:00.5", "2025-01-20 14:30:00.500000", "2025-01-20T14:30:00.500000"},
		{"2025-01-20T14:30:00Z", "2025-01-20 14:30:00+00:00", "2025-01-20T14:30:00+00:00"},
		{"2025-01-20T14:30:00-05:30", "2025-01-20 14:30:00-05:30", "2025-01-20T14:30:00-05:30"},
	} {
		var dt DateTime
		if err := json.Unmarshal([]byte(`"`+c.in+`"`), &dt); err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		iso, _ := json.Marshal(dt)
		if dt.PyStr() != c.str || string(iso) != `"`+c.iso+`"` {
			t.Errorf("%s: str %s iso %s, want %s %s", c.in, dt.PyStr(), iso, c.str, c.iso)
		}
	}
	for _, bad := range []string{`"2025-13-01T00:00:00"`, `"2025-02-30"`, `"2025-1-1"`, `"yesterday"`, `12`} {
		var dt DateTime
		if err := json.Unmarshal([]byte(bad), &dt); err == nil {
			t.Errorf("%s: accepted as %s", bad, dt.PyStr())
		}
	}
	var d Date
	if err := json.Unmarshal([]byte(`"2025-03-01T00:00:00"`), &d); err != nil || d.PyStr() != "2025-03-01" {
		t.Errorf("a midnight datetime as a date: %s, %v", d.PyStr(), err)
	}
	if err := json.Unmarshal([]byte(`"2025-03-01T10:00:00"`), &d); err == nil {
		t.Errorf("a datetime with a time accepted as a date")
	}
	if s := defaultCreatedAt().PyStr(); s != "2025-01-01" {
		t.Errorf("created_at's default dumps %q, want tau2's date 2025-01-01", s)
	}
}

// TestStrictDecoding: the database is refused as pydantic would refuse
// it, and defaults are pydantic's.
func TestStrictDecoding(t *testing.T) {
	line := `{"line_id": "L1", "phone_number": "555", "plan_id": "P1"`
	for name, doc := range map[string]string{
		"unknown field":     `{"lines": [` + line + `, "colour": "red"}]}`,
		"unknown top field": `{"planz": []}`,
		"missing required":  `{"lines": [{"line_id": "L1", "phone_number": "555"}]}`,
		"null required":     `{"lines": [{"line_id": "L1", "phone_number": null, "plan_id": "P1"}]}`,
		"null defaulted":    `{"lines": [` + line + `, "status": null}]}`,
		"bad enum":          `{"lines": [` + line + `, "status": "Asleep"}]}`,
		"bad date":          `{"lines": [` + line + `, "contract_end_date": "soon"}]}`,
		"wrong type":        `{"plans": [{"plan_id": 1, "name": "x", "data_limit_gb": 1, "price_per_month": 1, "data_refueling_price_per_gb": 1}]}`,
	} {
		if _, err := decodeDB([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	db, err := decodeDB([]byte(`{"lines": [` + line + `}], "customers": [{"customer_id": "C1", "full_name": "A", "date_of_birth": "x", "email": "e", "phone_number": "5", "address": {"street": "s", "city": "c", "state": "st", "zip_code": "z"}}], "bills": [{"bill_id": "B1", "customer_id": "C1", "period_start": "2025-01-01", "period_end": "2025-01-31", "issue_date": "2025-01-01", "total_due": 0, "due_date": "2025-01-15"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pyjson.Dumps(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"status": "Pending Activation"`, `"data_used_gb": 0.0`, `"device_id": null`,
		`"account_status": "Pending Verification"`, `"created_at": "2025-01-01"`, `"payment_methods": []`,
		`"line_items": [], "status": "Draft"`, `"total_due": 0.0`} {
		if !strings.Contains(got, want) {
			t.Errorf("the defaults: %s lacks %s", got, want)
		}
	}
}

func TestTOMLDates(t *testing.T) {
	b, err := tomlToJSON([]byte("a = 2025-01-02\nb = 2025-01-02T03:04:05\nc = 2025-01-02T03:04:05Z\nd = \"2025-01-02\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "2025-01-02", "b": "2025-01-02T03:04:05", "c": "2025-01-02T03:04:05Z", "d": "2025-01-02"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "reading db.toml in "+dir) || !strings.Contains(err.Error(), "TAU2_DATA_DIR") {
		t.Errorf("an empty directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, dbFile), []byte("[[plans]]\nplan_id = \"P1\"\nbogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "db.toml in "+dir) {
		t.Errorf("an invalid db.toml: %v", err)
	}
}

func TestPolicy(t *testing.T) {
	p := loadBenchData(t).Policy()
	main, _ := os.ReadFile(filepath.Join(benchData, mainPolicyFile))
	manual, _ := os.ReadFile(filepath.Join(benchData, techSupportFile))
	want := "<main_policy>\n" + string(main) + "\n</main_policy>\n<tech_support_policy>\n" + string(manual) + "\n</tech_support_policy>"
	if p != want {
		t.Errorf("the policy is not main_policy.md and tech_support_manual.md in their tags")
	}
	// tau2's get_environment().get_policy() over this data.
	const tau2Policy = "065b48503bf780153fc671455cdfddb85b4c6ffb11e2ea93bd940233d804c3e9"
	if sum := sha256.Sum256([]byte(p)); hex.EncodeToString(sum[:]) != tau2Policy {
		t.Errorf("the policy's sha256 is %x, tau2's %s", sum, tau2Policy)
	}
}

// TestUpdateDBRoundTrip: update_db with nothing to change re-validates the
// database into the same one, including after the tools wrote to it.
func TestUpdateDBRoundTrip(t *testing.T) {
	env, err := loadBenchData(t).NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	tk := env.Agent().(*Tools)
	tk.newBillID = func() string { return "B12345678" }
	for _, call := range []struct{ name, args string }{
		{"refuel_data", `{"customer_id": "C1002", "line_id": "L1004", "gb_amount": 1}`},
		{"suspend_line", `{"customer_id": "C1001", "line_id": "L1001", "reason": "x"}`},
		{"suspend_line_for_overdue_bill", `{"customer_id": "C1001", "line_id": "L1002", "new_bill_id": "B9", "contract_ended": true}`},
	} {
		var a map[string]json.RawMessage
		if err := json.Unmarshal([]byte(call.args), &a); err != nil {
			t.Fatal(err)
		}
		f, _ := domain.Lookup(tk, call.name)
		if _, err := f.Run(a); err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
	}
	before, _ := pyjson.Hash(tk.DB())
	if err := tk.UpdateDB(json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if after, _ := pyjson.Hash(tk.DB()); after != before {
		t.Errorf("update_db({}) changed the database")
	}
}
