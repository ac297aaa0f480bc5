"""Records what tau2's own domain code does, as golden files the Go port of
each domain (harness/taubench/<domain>) is tested against side by side.

tau2 cannot be installed here (it is not on PyPI; its package needs Python
3.12), but its domain code runs under 3.11: this script loads it from a
checkout of sierra-research/tau2-bench without running tau2/__init__.py
(which pulls in the LLM runner). It needs pydantic, docstring_parser,
loguru, addict, deepdiff, python-dotenv, toml and pyyaml; see README.md here.

For each domain it writes, under OUT/<domain>/:
  tools.json   the OpenAI schema of every tool the agent (and the user) is
               offered, in tau2's order, with each tool's type and
               mutates_state;
  grades.json  (with --grades) for every task graded without an LLM judge:
               the oracle's conversation (the gold actions, then the
               communicate_info said), one without the information, and
               one without the last write, each graded by tau2's own
               Environment, Action and Communicate evaluators;
  traces.json  for every task: the initial state set up, each gold action
               run through Environment.get_response (content and error
               flag), the database hashes after, and each env_assertion's
               result; then each scenario of the <domain>_calls*.json files here (calls
               the gold actions do not make: errors, reads, edge cases).

Usage: python generate.py --tau2 CHECKOUT --data DATA_DIR --out OUT [domain...]
where DATA_DIR is laid out as tau2's data/ (tau2/domains/<domain>/...).
"""

import argparse
import json
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_tau2(checkout, data_dir):
    os.environ["TAU2_DATA_DIR"] = str(data_dir)
    pkg = types.ModuleType("tau2")
    pkg.__path__ = [str(Path(checkout) / "src" / "tau2")]
    sys.modules["tau2"] = pkg
    from loguru import logger
    logger.remove()


def environment(domain, data_dir):
    base = Path(data_dir) / "tau2" / "domains" / domain
    if domain == "retail":
        from tau2.domains.retail.data_model import RetailDB
        from tau2.domains.retail.environment import get_environment
        return get_environment(db=RetailDB.load(str(base / "db.json")))
    if domain == "airline":
        from tau2.domains.airline.data_model import FlightDB
        from tau2.domains.airline.environment import get_environment
        return get_environment(db=FlightDB.load(str(base / "db.json")))
    if domain == "telecom":
        from tau2.domains.telecom.data_model import TelecomDB
        from tau2.domains.telecom.environment import get_environment
        from tau2.domains.telecom.user_data_model import TelecomUserDB
        return get_environment(db=TelecomDB.load(str(base / "db.toml")),
                               user_db=TelecomUserDB.load(str(base / "user_db.toml")))
    raise SystemExit("unknown domain %s" % domain)


def tool_list(toolkit):
    out = []
    for name, tool in toolkit.get_tools().items():
        out.append({"schema": tool.openai_schema, "type": toolkit.tool_type(name).value,
                    "mutates": toolkit.tool_mutates_state(name)})
    return out


def task_files(domain, data_dir):
    base = Path(data_dir) / "tau2" / "domains" / domain
    return sorted(base.glob("tasks*.json"))


def call(env, n, c):
    from tau2.data_model.message import ToolCall
    tc = ToolCall(id="call_%d" % n, name=c["name"], arguments=c.get("arguments") or {},
                  requestor=c.get("requestor", "assistant"))
    m = env.get_response(tc)
    return {"name": c["name"], "requestor": tc.requestor, "arguments": tc.arguments,
            "content": m.content, "error": m.error}


def state(env):
    return {"db_hash": env.get_db_hash(), "user_db_hash": env.get_user_db_hash()}


def set_up(env, task):
    init = task.initial_state
    if init is None:
        env.set_state(None, None, [])
        return
    env.set_state(init.initialization_data, init.initialization_actions, init.message_history or [])


def trace_task(domain, data_dir, task):
    env = environment(domain, data_dir)
    set_up(env, task)
    init = task.initial_state.model_dump(mode="json") if task.initial_state else None
    out = {"id": task.id, "initial_state": init, "initial": state(env), "calls": []}
    ec = task.evaluation_criteria
    for i, a in enumerate((ec.actions if ec else None) or []):
        out["calls"].append(call(env, i, {"name": a.name, "arguments": a.arguments, "requestor": a.requestor}))
    out["final"] = state(env)
    out["assertions"] = []
    for ea in (ec.env_assertions if ec else None) or []:
        try:
            met = env.run_env_assertion(ea, raise_assertion_error=False)
            out["assertions"].append({"assertion": ea.model_dump(mode="json"), "met": met})
        except Exception as e:  # noqa: BLE001 - recorded: the Go port must fail alike
            out["assertions"].append({"assertion": ea.model_dump(mode="json"), "error": str(e)})
    return out


def trace_scenarios(domain, data_dir, tasks):
    by_id = {t.id: t for t in tasks}
    scenarios = []
    for path in sorted(HERE.glob("%s_calls*.json" % domain)):
        scenarios += json.loads(path.read_text())
    out = []
    for sc in scenarios:
        env = environment(domain, data_dir)
        if sc.get("task"):
            set_up(env, by_id[sc["task"]])
        else:
            env.set_state(None, None, [])
        calls = [call(env, i, c) for i, c in enumerate(sc["calls"])]
        init = by_id[sc["task"]].initial_state if sc.get("task") else None
        out.append({"name": sc["name"], "initial_state": init.model_dump(mode="json") if init else None,
                    "calls": calls, "final": state(env)})
    return out


def messages_of(calls, final):
    """A conversation of tool-call messages, each answered, then the
    agent's final text; as dicts the Go test rebuilds the same messages
    from, and as tau2 messages."""
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
    wire, msgs = [], []
    wire.append({"role": "assistant", "content": "Hi! How can I help you today?"})
    msgs.append(AssistantMessage(role="assistant", content="Hi! How can I help you today?"))
    for i, c in enumerate(calls):
        by = c.get("requestor", "assistant")
        tc = {"id": "gold_%d" % i, "name": c["name"], "arguments": c["arguments"], "requestor": by}
        role = "user" if by == "user" else "assistant"
        wire.append({"role": role, "tool_calls": [tc]})
        wire.append({"role": "tool", "id": tc["id"], "requestor": by, "content": c["content"], "error": c["error"]})
        cls = UserMessage if role == "user" else AssistantMessage
        msgs.append(cls(role=role, content=None, tool_calls=[ToolCall(**tc)]))
        msgs.append(ToolMessage(id=tc["id"], role="tool", content=c["content"], requestor=by, error=c["error"]))
    wire.append({"role": "assistant", "content": final})
    msgs.append(AssistantMessage(role="assistant", content=final))
    return wire, msgs


def grade(domain, data_dir, task, msgs):
    """evaluate_simulation(EvaluationType.ALL) for a conversation the
    agent ended: its three evaluators, from tau2, combined over the reward
    basis as evaluate_simulation combines them (its own module needs the
    LLM runner's dependencies; the combination is these lines there)."""
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator
    ctor = lambda solo_mode=False, **kw: environment(domain, data_dir)  # noqa: E731
    env_r = EnvironmentEvaluator.calculate_reward(environment_constructor=ctor, task=task, full_trajectory=msgs)
    act_r = ActionEvaluator.calculate_reward(task=task, full_trajectory=msgs)
    com_r = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=msgs)
    basis = set(task.evaluation_criteria.reward_basis)
    reward, breakdown = 1.0, {}
    if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
        breakdown.update({k.value: v for k, v in (env_r.reward_breakdown or {}).items()})
        reward *= env_r.reward
    if RewardType.ACTION in basis:
        breakdown.update({k.value: v for k, v in (act_r.reward_breakdown or {}).items()})
        reward *= act_r.reward
    if RewardType.COMMUNICATE in basis:
        breakdown.update({k.value: v for k, v in (com_r.reward_breakdown or {}).items()})
        reward *= com_r.reward
    return {"reward": reward, "reward_breakdown": breakdown,
            "db_match": env_r.db_check.db_match if env_r.db_check else None}


def grade_task(domain, data_dir, task, trace):
    """The oracle's conversation and two that fail it, graded by tau2."""
    ec = task.evaluation_criteria
    if ec is None or (RewardTypeNL() in ec.reward_basis and ec.nl_assertions):
        return None
    info = "\n".join(ec.communicate_info or [])
    out = {"task": json.loads(task.model_dump_json(exclude_none=True)), "cases": []}
    cases = [("oracle", trace["calls"], info + "\n###STOP###")]
    if ec.communicate_info:
        cases.append(("silent", trace["calls"], "###STOP###"))
    writes = [i for i, c in enumerate(trace["calls"]) if not c["error"] and mutating(domain, data_dir, c["name"])]
    if writes:
        last = writes[-1]
        cases.append(("no_last_write", trace["calls"][:last] + trace["calls"][last + 1:], info + "\n###STOP###"))
    for name, calls, final in cases:
        wire, msgs = messages_of(calls, final)
        out["cases"].append({"name": name, "messages": wire, "grade": grade(domain, data_dir, task, msgs)})
    return out


def RewardTypeNL():
    from tau2.data_model.tasks import RewardType
    return RewardType.NL_ASSERTION


_MUTATING = {}


def mutating(domain, data_dir, name):
    if domain not in _MUTATING:
        env = environment(domain, data_dir)
        names = set(env.tools.get_tools()) | set(env.user_tools.get_tools() if env.user_tools else [])
        _MUTATING[domain] = {n for n in names if env._is_mutating_tool(n)}
    return name in _MUTATING[domain]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tau2", required=True, help="a checkout of sierra-research/tau2-bench")
    ap.add_argument("--data", required=True, help="a data directory laid out as tau2's data/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--grades", action="store_true", help="also write grades.json: conversations graded by tau2's evaluators")
    ap.add_argument("domains", nargs="*", default=["airline", "retail", "telecom"])
    a = ap.parse_args()
    load_tau2(a.tau2, a.data)
    from tau2.data_model.tasks import Task
    for domain in a.domains:
        env = environment(domain, a.data)
        tools = {"agent": tool_list(env.tools)}
        if env.user_tools is not None:
            tools["user"] = tool_list(env.user_tools)
        tasks = []
        for f in task_files(domain, a.data):
            raw = json.loads(f.read_text())
            if isinstance(raw, dict) and "tasks" in raw:
                raw = raw["tasks"]
            tasks += [Task.model_validate(t) for t in raw]
        traces = {"tasks": [trace_task(domain, a.data, t) for t in tasks],
                  "scenarios": trace_scenarios(domain, a.data, tasks)}
        out = Path(a.out) / domain
        out.mkdir(parents=True, exist_ok=True)
        (out / "tools.json").write_text(json.dumps(tools, indent=1) + "\n")
        (out / "traces.json").write_text(json.dumps(traces, indent=1) + "\n")
        if a.grades:
            grades = []
            for t, tr in zip(tasks, traces["tasks"]):
                g = grade_task(domain, a.data, t, tr)
                if g is not None:
                    grades.append(g)
            (out / "grades.json").write_text(json.dumps(grades, indent=1) + "\n")
        print("%s: %d tools, %d tasks, %d scenarios" % (domain, sum(len(v) for v in tools.values()),
                                                       len(traces["tasks"]), len(traces["scenarios"])))


if __name__ == "__main__":
    main()
