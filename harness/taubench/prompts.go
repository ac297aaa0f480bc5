package taubench

import (
	_ "embed"
	"os"
	"path/filepath"
	"strings"

	"evals.si/harness/taubench/tau2"
)

// The agent's instruction and system prompt, as tau2's LLMAgent writes
// them (tau2/agent/llm_agent.py).
const agentInstruction = `You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.`

func agentSystemPrompt(policy string) string {
	return "<instructions>\n" + agentInstruction + "\n</instructions>\n<policy>\n" + policy + "\n</policy>"
}

// greeting is the agent's first message (DEFAULT_FIRST_AGENT_MESSAGE).
const greeting = "Hi! How can I help you today?"

// Stop tokens: the agent's, and the user's three.
const (
	agentStop      = "###STOP###"
	userStop       = "###STOP###"
	userTransfer   = "###TRANSFER###"
	userOutOfScope = "###OUT-OF-SCOPE###"
)

// tau2's user simulation guidelines (data/tau2/user_simulator/), used
// when the data directory has none of its own.
var (
	//go:embed prompts/simulation_guidelines.md
	guidelines string
	//go:embed prompts/simulation_guidelines_tools.md
	guidelinesTools string
)

// userGuidelines are the global guidelines for the user, with tools
// (dual control) or without: the data directory's copy when it has one
// (tau2's data/tau2/user_simulator/), else the embedded one.
func userGuidelines(dataRoot string, tools bool) string {
	name, text := "simulation_guidelines.md", guidelines
	if tools {
		name, text = "simulation_guidelines_tools.md", guidelinesTools
	}
	if dataRoot != "" {
		if b, err := os.ReadFile(filepath.Join(dataRoot, "user_simulator", name)); err == nil { // data/tau2/user_simulator
			text = string(b)
		}
	}
	return text
}

// userSystemPrompt is UserSimulator.system_prompt: the guidelines (no
// runtime persona config, so its placeholder is emptied) and the task's
// scenario.
func userSystemPrompt(guidelines string, scenario tau2.UserScenario) string {
	g := strings.ReplaceAll(guidelines, "<PERSONA_GUIDELINES>", "")
	return g + "\n\n<scenario>\n" + scenario.String() + "\n</scenario>"
}
