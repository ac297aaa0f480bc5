package modelserver

import "strings"

// openingText joins the texts of the user messages that come before the
// first assistant turn; script rules match against it. Agent CLIs put
// context of their own in user messages ahead of the task: Codex sends an
// <environment_context> user message before the prompt, Claude Code a
// <system-reminder> part. Matching only the first user message would miss
// the task, so every opening user message counts.
func openingText(texts []string) string {
	var out []string
	for _, t := range texts {
		if t != "" {
			out = append(out, t)
		}
	}
	return strings.Join(out, "\n")
}
