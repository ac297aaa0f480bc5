"""Records what tau2's assistant-side set-up and assertion functions (not
tools, so generate.py's scenarios cannot call them) return, for
env_functions_test.go. Run from the repository root:

  /work/tau2ref/venv/bin/python harness/taubench/telecom/testdata/env_functions.py \
      --tau2 /work/tau2ref/tau2-bench --data /work/tau2ref/data \
      > harness/taubench/telecom/testdata/env_functions.json
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "scripts" / "tau2-reference"))
import generate as g  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--tau2", required=True)
ap.add_argument("--data", required=True)
opts = ap.parse_args()
g.load_tau2(opts.tau2, opts.data)

import uuid  # noqa: E402

# A draft bill's id is random in tau2: fixed here (the Go test fixes its
# own to match).
uuid.uuid4 = lambda: uuid.UUID("12345678-9abc-4def-8123-456789abcdef")
from tau2.data_model.tasks import EnvFunctionCall
cases = [
 [("set_data_usage", {"customer_id":"C1001","line_id":"L1001","data_used_gb":4.5})],
 [("set_data_usage", {"customer_id":"C1001","line_id":"L1004","data_used_gb":4.5})],
 [("set_data_usage", {"customer_id":"C9","line_id":"L1001","data_used_gb":4.5})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C1001","line_id":"L1002","new_bill_id":"B77","contract_ended":True})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C1001","line_id":"L1002","new_bill_id":"B77","contract_ended":False})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C1001","line_id":"L1003","new_bill_id":"B77","contract_ended":False})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C1002","line_id":"L1004","new_bill_id":"B77","contract_ended":False})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C9","line_id":"L1001","new_bill_id":"B77","contract_ended":False})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C1001","line_id":"L9","new_bill_id":"B77","contract_ended":False})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C1003","line_id":"L1001","new_bill_id":"B77","contract_ended":""})],
 [("suspend_line_for_overdue_bill", {"customer_id":"C1001","line_id":"L1002","new_bill_id":"B77","contract_ended":True}), ("assert_overdue_bill_exists", {"customer_id":"C1001","overdue_bill_id":"B77"}), ("assert_no_overdue_bill", {"overdue_bill_id":"B77"}), ("assert_line_status", {"customer_id":"C1001","line_id":"L1002","expected_status":"Suspended"})],
 [("assert_overdue_bill_exists", {"customer_id":"C1002","overdue_bill_id":"B1005"})],
 [("assert_overdue_bill_exists", {"customer_id":"C1001","overdue_bill_id":"B1005"})],
 [("assert_overdue_bill_exists", {"customer_id":"C1001","overdue_bill_id":"B1001"})],
 [("assert_overdue_bill_exists", {"customer_id":"C9","overdue_bill_id":"B1001"})],
 [("assert_no_overdue_bill", {"overdue_bill_id":"B1001"})],
 [("assert_no_overdue_bill", {"overdue_bill_id":"B1002"})],
 [("assert_no_overdue_bill", {"overdue_bill_id":"B404"})],
 [("assert_no_overdue_bill", {"overdue_bill_id":5})],
 [("assert_line_status", {"customer_id":"C1001","line_id":"L1001","expected_status":"Active"})],
 [("assert_line_status", {"customer_id":"C1001","line_id":"L1001","expected_status":"Suspended"})],
 [("assert_line_status", {"customer_id":"C1001","line_id":"L1001","expected_status":1})],
 [("assert_line_status", {"customer_id":"C1001","line_id":"L1004","expected_status":"Active"})],
 [("assert_data_refueling_amount", {"customer_id":"C1001","line_id":"L1001","expected_amount":0.0})],
 [("assert_data_refueling_amount", {"customer_id":"C1001","line_id":"L1001","expected_amount":1e-7})],
 [("assert_data_refueling_amount", {"customer_id":"C1001","line_id":"L1001","expected_amount":0})],
 [("assert_data_refueling_amount", {"customer_id":"C1001","line_id":"L1001","expected_amount":"0"})],
 [("assert_data_refueling_amount", {"customer_id":"C1001","line_id":"L1001","expected_amount":None})],
 [("assert_data_refueling_amount", {"customer_id":"C1001","line_id":"L1001"})],
 [("get_available_plan_ids", {})],
 [("refuel_data", {"customer_id":"C1002","line_id":"L1004","gb_amount":2.0}), ("get_details_by_id", {"id":"B12345678"}), ("get_customer_by_id", {"customer_id":"C1002"}), ("refuel_data", {"customer_id":"C1002","line_id":"L1005","gb_amount":0.5}), ("get_bills_for_customer", {"customer_id":"C1002"})],
 [("refuel_data", {"customer_id":"C1003","line_id":"L1009","gb_amount":3}), ("get_details_by_id", {"id":"B12345678"})],
 [("no_such_function", {})],
]
# update_db patches (initialization_data.agent_data) applied before the
# calls: a customer without created_at keeps tau2's date default until a
# second update re-validates it into a datetime; numbers become floats.
NEW_CUSTOMER = {"customer_id": "C2000", "full_name": "New Person", "date_of_birth": "2000-01-01",
                "email": "n@example.com", "phone_number": "555-000-2000",
                "address": {"street": "1 A St", "city": "B", "state": "CA", "zip_code": "90000"}}
updates = [
 [{"customers": [NEW_CUSTOMER]}],
 [{"customers": [NEW_CUSTOMER]}, {}],
 [{"lines": [{"line_id": "L1001", "phone_number": "555-123-2001", "plan_id": "P1001", "data_used_gb": 3}]}],
 [{"plans": [{"plan_id": "P1001", "name": "Basic", "data_limit_gb": 5, "price_per_month": 40, "data_refueling_price_per_gb": 5, "colour": "red"}]}],
]
update_calls = [
 [("get_customer_by_id", {"customer_id": "C2000"}), ("get_bills_for_customer", {"customer_id": "C2000"})],
 [("get_customer_by_id", {"customer_id": "C2000"})],
 [("get_details_by_id", {"id": "L1001"}), ("get_customer_by_phone", {"phone_number": "555-123-2001"})],
 [],
]
cases = [(None, c) for c in cases] + list(zip(updates, update_calls))

out=[]
for update, calls in cases:
    env = g.environment("telecom", opts.data)
    item = {}
    if update is not None:
        item["update"] = update
        try:
            for u in update:
                env.tools.update_db(u)
        except Exception as e:
            item["update_error"] = str(e).splitlines()[0]
    res=[]
    for name, args in calls:
        try:
            r = env.run_env_function_call(EnvFunctionCall(env_type="assistant", func_name=name, arguments=args))
            res.append({"result": env.to_json_str(r)})
        except Exception as e:
            res.append({"error": str(e)})
    item.update({"calls":[{"name":n,"arguments":a} for n,a in calls], "results":res, "db_hash": env.get_db_hash()})
    out.append(item)
print(json.dumps(out, indent=1))
