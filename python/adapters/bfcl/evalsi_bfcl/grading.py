"""Single-turn grading, by BFCL's own eval_runner entry functions."""

import copy
import json

from bfcl_eval.eval_checker import eval_runner

from evalsi_bfcl.decode import FCDecoder
from evalsi_bfcl.entry import GRADING_MODEL, RELEVANCE_CATEGORIES


def grade_single(entry, responses):
    """BFCL's result dict for one single-turn answer. responses: the
    model_responses of the answer (calls.model_responses), decoded with
    BFCL's FC decode_ast and graded as eval_runner grades the category: the
    AST checker (with its decoder_failed / decoder_wrong_output_format
    cases), or the relevance rule for irrelevance, live_irrelevance and
    live_relevance."""
    prompt = copy.deepcopy(entry.entry)
    prompt["function"] = copy.deepcopy(entry.prompt_functions)
    if entry.category in RELEVANCE_CATEGORIES:
        return eval_runner._evaluate_single_relevance_entry(
            FCDecoder(), entry.id, responses, prompt, GRADING_MODEL, entry.category)
    return eval_runner._evaluate_single_ast_entry(
        FCDecoder(), entry.id, responses, entry.answer, prompt, GRADING_MODEL, entry.category,
        language=entry.language, return_format=entry.return_format, has_tool_call_tag=False)


def decoded_output(entry, responses):
    """The run's output: the decoded calls as JSON, or the text when the
    answer does not decode."""
    try:
        return json.dumps(FCDecoder().decode_ast(responses, entry.return_format, False))
    except Exception:  # noqa: BLE001 - BFCL's decoder raises whatever json.loads or indexing raises
        return responses if isinstance(responses, str) else json.dumps(responses)
