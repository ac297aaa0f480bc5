package toolcall

import (
	"context"
	"fmt"

	"evals.si/model"
)

// Mode is how tool calls travel (harness.builtin.tool_call_mode).
type Mode string

// The modes. A resolved Protocol is always native or prompted.
const (
	ModeAuto     Mode = "auto"
	ModeNative   Mode = "native"
	ModePrompted Mode = "prompted"
)

// Protocol is the resolved protocol of a run.
type Protocol struct {
	// Mode is ModeNative (tools go to the API; structured calls come back,
	// and Format also parses calls a server left in the text) or
	// ModePrompted (no tools go to the API; the system prompt states
	// Format and calls are parsed from the reply's text).
	Mode   Mode
	Format Format
	// Reason says how the protocol was chosen (the probe's finding, or
	// "set by the spec").
	Reason string
}

// Prober finds out whether the endpoint supports native tool calls;
// model.ProbeNativeTools on the run's connector is the real one.
type Prober func(ctx context.Context) (model.NativeTools, error)

// Resolve turns the spec's tool_call_mode and tool_call_format into the
// run's protocol. The rules:
//
//	mode      format            protocol                       probe
//	(unset)   (unset)           native, native_json            no  (the behaviour before modes existed)
//	(unset)   native_json       native, native_json            no
//	(unset)   tags | fenced     prompted, that format          no
//	native    (unset) | json    native, native_json            yes: unsupported fails closed
//	prompted  (unset)           prompted, tool_call_tags       no
//	prompted  tags | fenced     prompted, that format          no
//	auto      any               native, native_json            yes: when supported
//	auto      (unset) | tags    prompted, tool_call_tags       yes: when unsupported
//	auto      fenced | json     prompted, that format          yes: when unsupported
//
// native with tags or fenced, and prompted with native_json, are errors
// (spec validation refuses them first). An error from the probe is an
// error: nothing was learned, and guessing would pick the wrong protocol.
func Resolve(ctx context.Context, mode, format string, probe Prober) (Protocol, error) {
	m, f := Mode(mode), Format(format)
	switch f {
	case "", FormatTags, FormatFencedShell, FormatNativeJSON:
	default:
		return Protocol{}, fmt.Errorf("harness.builtin.tool_call_format %q is unknown (one of tool_call_tags, fenced_shell, native_json)", format)
	}
	ask := func() (model.NativeTools, error) {
		if probe == nil {
			return model.NativeTools{}, fmt.Errorf("harness.builtin.tool_call_mode %s needs a native tool probe, and none was given", m)
		}
		nt, err := probe(ctx)
		if err != nil {
			return nt, fmt.Errorf("finding out whether the model endpoint supports native tool calls (tool_call_mode %s): %w", m, err)
		}
		return nt, nil
	}
	switch m {
	case "":
		if f == FormatTags || f == FormatFencedShell {
			return Protocol{Mode: ModePrompted, Format: f, Reason: "tool_call_format " + string(f) + " is a prompted format"}, nil
		}
		return Protocol{Mode: ModeNative, Format: FormatNativeJSON, Reason: "tool_call_mode is unset: native tool calling"}, nil
	case ModePrompted:
		switch f {
		case "":
			f = FormatTags
		case FormatNativeJSON:
			return Protocol{}, fmt.Errorf("harness.builtin.tool_call_format native_json does not work with tool_call_mode prompted: use tool_call_tags or fenced_shell")
		}
		return Protocol{Mode: ModePrompted, Format: f, Reason: "tool_call_mode prompted is set by the spec"}, nil
	case ModeNative:
		if f != "" && f != FormatNativeJSON {
			return Protocol{}, fmt.Errorf("harness.builtin.tool_call_format %s does not work with tool_call_mode native: use native_json", f)
		}
		nt, err := ask()
		if err != nil {
			return Protocol{}, err
		}
		if !nt.Supported {
			return Protocol{}, fmt.Errorf("harness.builtin.tool_call_mode is native, but the model endpoint does not support native tool calls: %s. Use tool_call_mode: prompted (or auto) for this model", nt.Reason)
		}
		return Protocol{Mode: ModeNative, Format: FormatNativeJSON, Reason: nt.Reason}, nil
	case ModeAuto:
		nt, err := ask()
		if err != nil {
			return Protocol{}, err
		}
		if nt.Supported {
			return Protocol{Mode: ModeNative, Format: FormatNativeJSON, Reason: "auto: " + nt.Reason}, nil
		}
		if f == "" {
			f = FormatTags
		}
		return Protocol{Mode: ModePrompted, Format: f, Reason: "auto: " + nt.Reason}, nil
	}
	return Protocol{}, fmt.Errorf("harness.builtin.tool_call_mode %q is unknown (one of auto, native, prompted)", mode)
}
