package external

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"evals.si/trajectory"
)

// decodeEvent reads one streamed event and checks it before it joins the
// trajectory:
//   - it is the JSON of a trajectory.Event with no unknown fields;
//   - its kind is one a harness may stream: message, model_call, tool_call,
//     tool_result, log, error, stop, and escalation only as denied (the
//     protocol has no way to grant one). checker and policy events are the
//     worker's own: the verdict comes from the checker or Check, and the
//     sandbox's denials are recorded by Worker.Exec;
//   - exactly the payload its kind names is set.
//
// Seq is assigned by the worker; a zero time becomes the time of arrival.
func decodeEvent(b []byte) (trajectory.Event, error) {
	var e trajectory.Event
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("not the JSON of a trajectory event: %w", err)
	}
	if dec.More() {
		return e, fmt.Errorf("more than one JSON value")
	}
	set := map[trajectory.Kind]bool{
		trajectory.KindMessage: e.Message != nil, trajectory.KindModelCall: e.ModelCall != nil,
		trajectory.KindToolCall: e.ToolCall != nil, trajectory.KindToolResult: e.ToolResult != nil,
		trajectory.KindPolicy: e.Policy != nil, trajectory.KindEscalation: e.Escalation != nil,
		trajectory.KindChecker: e.Checker != nil, trajectory.KindStop: e.Stop != nil,
		trajectory.KindLog: e.Log != nil, trajectory.KindError: e.Error != nil,
	}
	switch e.Kind {
	case trajectory.KindMessage, trajectory.KindModelCall, trajectory.KindToolCall, trajectory.KindToolResult,
		trajectory.KindLog, trajectory.KindError, trajectory.KindStop, trajectory.KindEscalation:
	case trajectory.KindChecker, trajectory.KindPolicy:
		return e, fmt.Errorf("a harness may not stream %s events: the worker records them", e.Kind)
	case "":
		return e, fmt.Errorf("the event has no kind")
	default:
		return e, fmt.Errorf("unknown event kind %q", e.Kind)
	}
	for k, has := range set {
		if k == e.Kind && !has {
			return e, fmt.Errorf("%s event without its %s payload", e.Kind, e.Kind)
		}
		if k != e.Kind && has {
			return e, fmt.Errorf("%s event also carries a %s payload", e.Kind, k)
		}
	}
	switch {
	case e.Kind == trajectory.KindMessage:
		switch e.Message.Role {
		case trajectory.RoleSystem, trajectory.RoleUser, trajectory.RoleAssistant, trajectory.RoleTool:
		default:
			return e, fmt.Errorf("message event with role %q (want system, user, assistant or tool)", e.Message.Role)
		}
	case e.Kind == trajectory.KindEscalation && e.Escalation.Granted:
		return e, fmt.Errorf("escalation event marked granted: an external harness cannot be granted escalations")
	case e.Kind == trajectory.KindStop && e.Stop.Reason == "":
		return e, fmt.Errorf("stop event without a reason")
	case e.Kind == trajectory.KindToolCall && e.ToolCall.Name == "":
		return e, fmt.Errorf("tool_call event without a tool name")
	case e.Step < 0 || e.DurationMS < 0:
		return e, fmt.Errorf("negative step or duration")
	}
	e.Seq = 0
	return e, nil
}

func removeAll(dir string) { _ = os.RemoveAll(dir) }
