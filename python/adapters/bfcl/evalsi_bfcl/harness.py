"""BFCLHarness: one BFCL entry per trial, over the harness protocol."""

import importlib.metadata
import json
import os
import time

import evalsi_harness as eh
from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC, MAXIMUM_STEP_LIMIT
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import is_empty_execute_response

from evalsi_bfcl import oracle, sandbox
from evalsi_bfcl.calls import ERROR_PREFIX, Refused, checked_call, model_responses
from evalsi_bfcl.decode import FCDecoder
from evalsi_bfcl.entry import Entry, offered_name, split_system, tools_for
from evalsi_bfcl.grading import decoded_output
from evalsi_bfcl.verdict import failure, verdict

# Error types for a trial a resource limit ended (BFCL has none: its runs
# share one process and have no limits).
CALL_LIMIT = "evalsi:call_limit_exceeded"
CHECK_LIMIT = "evalsi:check_limit_exceeded"

# What the checker re-executes for a call the harness refused: a name no
# class has, so it is an error result, as BFCL's own run of a call to a
# function that does not exist would be, and the turn is not empty (BFCL
# would have executed the model's call). Never model text.
REFUSED_CALL = {"evalsi_refused_call": {}}


class _State:
    def __init__(self, entry, oracle_):
        self.entry = entry
        self.oracle = oracle_
        self.summary = None  # BFCL's result, once graded
        self.session = None  # the multi-turn child


class BFCLHarness:
    """BFCL (bfcl-eval 2026.3.23) as an Evals.si harness.

    Single-turn entries: one model turn with the entry's functions as
    tools, graded by BFCL's AST checker or relevance rule. Multi-turn
    entries: BFCL's FC loop, the calls executed by BFCL's classes in a child
    process of the trial, graded by BFCL's multi-turn checker. With the
    oracle target, the ground truth answers instead of the model.

    limits: sandbox.Limits for the multi-turn children (default: from
    EVALSI_BFCL_* through getenv, else the defaults).
    """

    def __init__(self, limits=None, getenv=os.environ.get):
        self.limits = limits or sandbox.Limits.from_env(getenv)
        self._ctx = sandbox.context()
        self._version = importlib.metadata.version("bfcl-eval")

    def describe(self):
        # no-sandbox: the worker makes no sandbox for these trials; nothing
        # here calls worker.exec, read_file or write_file.
        return {"name": "bfcl", "version": self._version, "capabilities": ["check", "no-sandbox"]}

    def setup(self, trial):
        trial.state = _State(Entry(trial.task.get("metadata")), bool(trial.task.get("oracle")))

    def run(self, trial):
        st = trial.state
        if st is None:
            raise RuntimeError("run: trial %s was not set up" % trial.id)
        if st.entry.multi_turn:
            result = yield from self._multi_turn(trial, st)
        else:
            result = yield from self._single_turn(trial, st)
        if st.summary is not None and not st.summary["valid"]:
            yield eh.log("bfcl: %s" % st.summary.get("error_type", ""))
        return result

    def check(self, trial):
        st = trial.state
        if st is None or st.summary is None:
            raise RuntimeError("check: trial %s has no BFCL result (its run did not finish)" % trial.id)
        return verdict(st.summary)

    def teardown(self, trial):
        st = trial.state
        if st is not None and st.session is not None:
            st.session.close(kill=True)
            st.session = None

    # The model's turn, or none for the oracle.

    def _chat(self, trial, messages, system, tools, step):
        start = time.monotonic()
        resp = trial.worker.chat(messages, system=system, tools=tools)
        yield eh.model_call(resp["model"], resp["usage"], resp["cost_usd"], resp["stop_reason"], step=step,
                            duration_ms=(time.monotonic() - start) * 1000)
        msg = dict(resp["message"], role="assistant")
        calls = [dict(c) for c in msg.get("tool_calls") or []]
        for i, c in enumerate(calls):
            if not c.get("id"):
                c["id"] = "call_%d_%d" % (step, i)
        if calls:
            msg["tool_calls"] = calls
        return msg

    @staticmethod
    def _tool_call(c, step):
        # A tool_call event must name its tool; a nameless call (refused,
        # as no function has that name) is recorded under "?".
        return eh.tool_call({"id": c["id"], "name": c.get("name") or "?", "arguments": c.get("arguments")}, step=step)

    # Single turn.

    def _single_turn(self, trial, st):
        e = st.entry
        system, messages = split_system(e.entry["question"][0])
        if system:
            yield eh.message({"role": "system", "content": system})
        for m in messages:
            yield eh.message(m)
        if st.oracle:
            msg = oracle.single_turn(e)
        else:
            msg = yield from self._chat(trial, messages, system, e.tools, 1)
        yield eh.message(msg, step=1)
        for c in msg.get("tool_calls") or []:
            yield self._tool_call(c, 1)
        responses = model_responses(msg)
        try:
            st.summary = sandbox.grade_single(self._ctx, e, responses, self.limits)
        except sandbox.LimitExceeded as lim:
            st.summary = failure(CHECK_LIMIT, "BFCL's checker, grading the answer, went over the %s" % lim)
            yield eh.log("bfcl: grading the answer went over the %s" % lim)
        return {"output": decoded_output(e, responses), "stop_reason": "answered"}

    # Multi turn: BaseHandler.inference_multi_turn_FC, with the calls run
    # in the trial's child.

    def _multi_turn(self, trial, st):
        e = st.entry
        spec = {"id": e.id, "initial_config": e.entry.get("initial_config", {}),
                "involved_classes": e.entry["involved_classes"],
                "long_context": "long_context" in e.category or "composite" in e.category}
        try:
            st.session = sandbox.Session(self._ctx, spec, self.limits)
        except sandbox.LimitExceeded as lim:
            # Before any call: the entry's own scenario, not the model.
            raise sandbox.ChildError("entry %s: making its class instances went over the %s" % (e.id, lim)) from None
        functions = list(e.functions)
        tools = tools_for(functions)
        offered = {offered_name(f["name"]): f["name"] for f in functions}
        system, messages = "", []
        step = 0
        model_result = []  # per turn, per step: the calls run, for the checker
        executed = []  # per turn: their call strings, for the output
        stop_reason = "answered"

        for turn_idx, turn in enumerate(e.entry["question"]):
            if turn_idx in e.holdouts:
                added = e.holdouts[turn_idx]
                functions.extend(added)
                tools = tools_for(functions)
                offered = {offered_name(f["name"]): f["name"] for f in functions}
                yield eh.log("bfcl: turn %d adds functions: %s" % (turn_idx, ", ".join(f["name"] for f in added)))
                turn = [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}]
            sys_part, rest = split_system(turn)
            if sys_part:
                system = system + "\n\n" + sys_part if system else sys_part
                yield eh.message({"role": "system", "content": sys_part})
            for m in rest:
                messages.append(m)
                yield eh.message(m)

            turn_result, turn_calls = [], []
            oracle_steps = self._oracle_turn(e, turn_idx, offered) if st.oracle else None
            count = 0
            force_quit = False
            while True:
                if trial.cancelled.is_set():
                    return {"output": json.dumps(executed + [turn_calls]), "stop_reason": "cancelled"}
                step += 1
                if st.oracle:
                    msg = oracle_steps(step)
                else:
                    msg = yield from self._chat(trial, messages, system, tools, step)
                messages.append(msg)
                yield eh.message(msg, step=step)
                calls = msg.get("tool_calls") or []
                try:
                    decoded = FCDecoder().decode_execute(model_responses(msg), has_tool_call_tag=False)
                except Exception:  # noqa: BLE001 - BFCL ends the turn on any decode failure
                    # A text answer, or arguments that are not a JSON object.
                    # BFCL ends the turn; the providers want every call
                    # answered, so each gets an error result.
                    for c in calls:
                        yield from self._tool_result(messages, c, step, ERROR_PREFIX + "not run: the arguments are "
                                                     "not a JSON object of named arguments, which ends the turn",
                                                     True, 0)
                    turn_result.append([])
                    break
                if is_empty_execute_response(decoded):
                    turn_result.append([])
                    break
                ran = []
                for i, c in enumerate(calls):
                    start = time.monotonic()
                    try:
                        call_str, parsed = checked_call(c.get("name", ""), c.get("arguments"), offered, e.methods)
                    except Refused as r:
                        yield from self._tool_result(messages, c, step, ERROR_PREFIX + "not run: " + str(r), True,
                                                     start)
                        ran.append(REFUSED_CALL)
                        continue
                    try:
                        out = st.session.execute(call_str)
                    except sandbox.LimitExceeded as lim:
                        yield from self._tool_result(messages, c, step, ERROR_PREFIX + "stopped: the call went over "
                                                     "the %s" % lim, True, start)
                        for later in calls[i + 1:]:
                            yield from self._tool_result(messages, later, step, ERROR_PREFIX + "not run: an earlier "
                                                         "call went over a limit", True, time.monotonic())
                        st.summary = failure(CALL_LIMIT, "call %s went over the %s; the trial ended there"
                                             % (call_str[:200], lim))
                        st.session.close(kill=True)
                        return {"output": json.dumps(executed + [turn_calls + [call_str]]), "stop_reason": "limit"}
                    ran.append(parsed)
                    turn_calls.append(call_str)
                    yield from self._tool_result(messages, c, step, out, out.startswith(ERROR_PREFIX), start)
                turn_result.append(ran)
                count += 1
                if count > MAXIMUM_STEP_LIMIT:
                    force_quit = True
                    yield eh.log("bfcl: turn %d: forced to quit after %d steps" % (turn_idx, MAXIMUM_STEP_LIMIT))
                    break
            model_result.append(turn_result)
            executed.append(turn_calls)
            if force_quit:
                stop_reason = "max_steps"
                break

        try:
            st.summary = st.session.check(model_result, e.answer, e.checker_entry(), e.category)
        except sandbox.LimitExceeded as lim:
            st.summary = failure(CHECK_LIMIT, "BFCL's checker, re-executing the calls, went over the %s" % lim)
        st.session.close()
        return {"output": json.dumps(executed), "stop_reason": stop_reason}

    def _tool_result(self, messages, call, step, output, is_error, start):
        """Each call's tool_call event, then its result: the tool message
        the model gets next, and the tool_result event."""
        yield self._tool_call(call, step)
        messages.append({"role": "tool", "content": output, "tool_call_id": call["id"], "name": call.get("name", "")})
        yield eh.tool_result(call["id"], call.get("name") or "?", output, is_error=is_error, step=step,
                             duration_ms=(time.monotonic() - start) * 1000 if start else 0)

    @staticmethod
    def _oracle_turn(e, turn_idx, offered):
        """The oracle's steps of a turn: all its ground-truth calls in one
        step (none for an empty turn), then a text answer, which ends it."""
        state = {"calls_done": False}

        def next_step(step):
            if not state["calls_done"]:
                state["calls_done"] = True
                msg = oracle.multi_turn_calls(e, turn_idx, step, offered)
                if msg is not None:
                    return msg
            return oracle.turn_done()

        return next_step
