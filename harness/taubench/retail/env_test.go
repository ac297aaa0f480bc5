package retail

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
)

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "reading db.json in "+dir) || !strings.Contains(err.Error(), "TAU2_DATA_DIR") {
		t.Fatalf("Load of an empty directory: %v", err)
	}
	for _, c := range []struct{ db, want string }{
		{`{"products": {}, "users": {}, "orders": {}, "flights": {}}`, `unknown field "flights"`},
		{`{"products": {}, "users": {}}`, "products, users and orders are required"},
		{`{"products": {}, "orders": {}, "users": {"u": {"user_id": "u", "name": {"first_name": "a", "last_name": "b"},
			"address": {"address1": "", "address2": "", "city": "", "country": "", "state": "", "zip": ""},
			"email": "", "payment_methods": {"x": {"source": "cash", "id": "x"}}, "orders": []}}}`, `source "cash"`},
	} {
		if err := os.WriteFile(filepath.Join(dir, "db.json"), []byte(c.db), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%s): %v, want an error with %q", c.db, err, c.want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "db.json"), []byte(`{"products": {}, "users": {}, "orders": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "reading policy.md") {
		t.Errorf("Load without policy.md: %v", err)
	}
}

func TestPolicy(t *testing.T) {
	d := loadBench(t)
	want, err := os.ReadFile(filepath.Join(benchDir, "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Policy() != string(want) {
		t.Error("Policy() is not policy.md's text")
	}
}

// Environments must not share state: a write in one leaves the others,
// and the data they are copied from, as they were.
func TestNewEnvIsolated(t *testing.T) {
	d := loadBench(t)
	a, err := d.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.NewEnv()
	before, _ := pyjson.Hash(b.Agent().DB())
	calls := []struct{ name, args string }{
		{"cancel_pending_order", `{"order_id": "#W6779827", "reason": "no longer needed"}`},
		{"modify_pending_order_items", `{"order_id": "#W4566809", "item_ids": ["1569829406"], "new_item_ids": ["8470360507"], "payment_method_id": "gift_card_2259499"}`},
		{"modify_user_address", `{"user_id": "raj_sanchez_2970", "address1": "a", "address2": "", "city": "c", "state": "s", "country": "x", "zip": "1"}`},
		{"exchange_delivered_order_items", `{"order_id": "#W1067251", "item_ids": ["6452271382"], "new_item_ids": ["9580569596"], "payment_method_id": "credit_card_3362387"}`},
	}
	for _, c := range calls {
		var args domain.Args
		if err := json.Unmarshal([]byte(c.args), &args); err != nil {
			t.Fatal(err)
		}
		if _, err := domain.CallTool(a.Agent(), c.name, args); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	changed, _ := pyjson.Hash(a.Agent().DB())
	after, _ := pyjson.Hash(b.Agent().DB())
	c, _ := d.NewEnv()
	fresh, _ := pyjson.Hash(c.Agent().DB())
	if changed == before || after != before || fresh != before {
		t.Errorf("hashes: written %s, other env %s then %s, new env %s", changed, before, after, fresh)
	}
}

func TestUpdateDB(t *testing.T) {
	env, err := loadBench(t).NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	tk := env.Agent()
	patch := `{"users": {"raj_sanchez_2970": {"payment_methods": {"gift_card_2259499": {"balance": 1000}}}}}`
	if err := tk.UpdateDB(json.RawMessage(patch)); err != nil {
		t.Fatal(err)
	}
	u, _ := tk.DB().(*RetailDB).Users.Get("raj_sanchez_2970")
	pm, _ := u.PaymentMethods.Get("gift_card_2259499")
	if gc, ok := pm.(*GiftCard); !ok || gc.Balance != 1000 {
		t.Errorf("after update_db the gift card is %#v", pm)
	}
	if err := tk.UpdateDB(json.RawMessage(`{"coupons": {}}`)); err == nil {
		t.Error("update_db accepted an unknown top-level field")
	}
}
