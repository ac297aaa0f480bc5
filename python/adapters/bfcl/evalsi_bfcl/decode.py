"""BFCL's decoders for an OpenAI-style function-calling model."""

from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler


class FCDecoder:
    """A stand-in for BFCL's OpenAI Completions handler, whose decode_ast and
    decode_execute use nothing of the handler but is_fc_model: the unbound
    methods run with this as self, so no client is built."""

    is_fc_model = True

    def decode_ast(self, result, language, has_tool_call_tag):
        return OpenAICompletionsHandler.decode_ast(self, result, language, has_tool_call_tag)

    def decode_execute(self, result, has_tool_call_tag):
        return OpenAICompletionsHandler.decode_execute(self, result, has_tool_call_tag)
