// Package domain is what a tau2 domain (airline, retail, telecom) provides
// to the τ-bench harness: its toolkits (the agent's, and for dual control
// the user's), each over its own database, and the environment that holds
// them. The harness runs the conversation, replays trajectories and grades
// through these interfaces alone; each domain's package owns its data
// model and tools, written to behave as tau2's: same arguments, results,
// errors and database writes.
package domain

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// ToolType is tau2's ToolType: what a tool does.
type ToolType string

// The tool types.
const (
	Read    ToolType = "read"
	Write   ToolType = "write"
	Think   ToolType = "think"
	Generic ToolType = "generic"
)

// Param is one parameter of a tool, in signature order.
type Param struct {
	Name string
	// Optional: the Python signature gives it a default.
	Optional bool
}

// Func is a toolkit function: a tool the model (or the user) may call, or a
// set-up or assertion function a task's initialization_actions and
// env_assertions call (tau2 reaches those by getattr on the toolkit).
type Func struct {
	Name string
	// Tool: offered to the model (tau2's @is_tool); false for set-up and
	// assertion functions.
	Tool bool
	Type ToolType
	// Mutates is tau2's mutates_state: only mutating tools are replayed when
	// the grader rebuilds the environment from the trajectory. tau2 infers
	// it from the type (Write) unless the tool says otherwise.
	Mutates bool
	Params  []Param
	// Run calls the function with bound arguments. Its error is what the
	// Python function raises: the tool message says "Error: " + its text.
	Run func(a Args) (any, error)
}

// Toolkit is one side's functions over its database (tau2's ToolKitBase).
type Toolkit interface {
	// Class is the toolkit's Python class name, for the TypeError texts
	// ("RetailTools.get_order_details() missing 1 required ...").
	Class() string
	// Funcs lists every function (tools, set-up and assertion functions).
	Funcs() []Func
	// Tools are the tools the model is offered, in tau2's order, as tau2
	// describes them (see ParseTools).
	Tools() []Schema
	// DB is the database model, written by pyjson for hashing.
	DB() any
	// UpdateDB merges patch (a JSON object) into the database as tau2's
	// update_db does: the model's dump updated recursively, then validated
	// again.
	UpdateDB(patch json.RawMessage) error
}

// Env is one live environment: fresh databases, the toolkits over them.
type Env interface {
	Agent() Toolkit
	// User is the user's toolkit (dual control); nil when the domain has
	// none.
	User() Toolkit
	// Sync is the environment's sync_tools, run after every tool call and
	// environment function call.
	Sync() error
}

// Data is a domain's data, read once from its data directory.
type Data interface {
	// Policy is the agent's domain policy, as tau2 assembles it.
	Policy() string
	// NewEnv returns a fresh environment over a copy of the databases.
	NewEnv() (Env, error)
}

// Args are a call's arguments, JSON values by name, as tau2 passes
// them to the Python function (**kwargs).
type Args map[string]json.RawMessage

// Bind checks args against f's signature as a Python call would, and
// returns TypeError's text for a missing or unexpected argument.
func Bind(class string, f Func, args Args) error {
	known := map[string]bool{}
	var missing []string
	for _, p := range f.Params {
		known[p.Name] = true
		if _, ok := args[p.Name]; !ok && !p.Optional {
			missing = append(missing, "'"+p.Name+"'")
		}
	}
	var extra []string
	for k := range args {
		if !known[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		return fmt.Errorf("%s.%s() got an unexpected keyword argument '%s'", class, f.Name, extra[0])
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s.%s() missing 1 required positional argument: %s", class, f.Name, missing[0])
	case 2:
		return fmt.Errorf("%s.%s() missing 2 required positional arguments: %s and %s", class, f.Name, missing[0], missing[1])
	default:
		return fmt.Errorf("%s.%s() missing %d required positional arguments: %s, and %s",
			class, f.Name, len(missing), strings.Join(missing[:len(missing)-1], ", "), missing[len(missing)-1])
	}
}

// Lookup finds the function called name.
func Lookup(tk Toolkit, name string) (Func, bool) {
	for _, f := range tk.Funcs() {
		if f.Name == name {
			return f, true
		}
	}
	return Func{}, false
}

// HasTool reports whether tk has a tool (not a set-up or assertion
// function) called name.
func HasTool(tk Toolkit, name string) (Func, bool) {
	f, ok := Lookup(tk, name)
	return f, ok && f.Tool
}

// CallTool runs the tool name of tk with args, as ToolKitBase.use_tool
// does: only tools, Python's binding first, then the function. The error
// is the text tau2 puts after "Error: ".
func CallTool(tk Toolkit, name string, args Args) (any, error) {
	f, ok := HasTool(tk, name)
	if !ok {
		return nil, fmt.Errorf("Tool '%s' not found.", name)
	}
	return call(tk, f, args)
}

// CallFunc runs any function of tk (a tool, a set-up or an assertion
// function), as run_env_function_call reaches it by getattr.
func CallFunc(tk Toolkit, name string, args Args) (any, error) {
	f, ok := Lookup(tk, name)
	if !ok {
		return nil, fmt.Errorf("'%s' object has no attribute '%s'", tk.Class(), name)
	}
	return call(tk, f, args)
}

func call(tk Toolkit, f Func, args Args) (any, error) {
	if err := Bind(tk.Class(), f, args); err != nil {
		return nil, err
	}
	if args == nil {
		args = Args{}
	}
	return f.Run(args)
}

// Decode decodes argument name into v; a value of the wrong type is an
// error naming the argument. An absent argument leaves v as it is (its
// Python default).
func (a Args) Decode(name string, v any) error {
	raw, ok := a[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("argument %s: %s is not %s", name, raw, describe(v))
	}
	return nil
}

func describe(v any) string {
	switch v.(type) {
	case *string:
		return "a string"
	case *int:
		return "an integer"
	case *float64:
		return "a number"
	case *bool:
		return "a boolean"
	case *[]string:
		return "a list of strings"
	}
	return "of the expected type"
}
