package spec

// The largest value each caps field accepts. They keep a typo (a size in
// bytes where KiB were meant) from turning a cap into no cap at all.
const (
	MaxCommandOutputKB = 1 << 20 // 1 GiB per stream
	MaxModelResponseMB = 4096    // 4 GiB
	MaxEventTextKB     = 1 << 16 // 64 MiB
	MaxTrialMemoryMB   = 1 << 16 // 64 GiB
)

// capField is one field of Caps, for validation and the JSON Schema.
type capField struct {
	name     string // JSON name
	unit     string
	def, max int
	value    func(*Caps) int
}

func capFields() []capField {
	return []capField{
		{"command_output_kb", "KiB", DefaultCommandOutputKB, MaxCommandOutputKB, func(c *Caps) int { return c.CommandOutputKB }},
		{"model_response_mb", "MiB", DefaultModelResponseMB, MaxModelResponseMB, func(c *Caps) int { return c.ModelResponseMB }},
		{"event_text_kb", "KiB", DefaultEventTextKB, MaxEventTextKB, func(c *Caps) int { return c.EventTextKB }},
		{"trial_memory_mb", "MiB", DefaultTrialMemoryMB, MaxTrialMemoryMB, func(c *Caps) int { return c.TrialMemoryMB }},
	}
}

// get is the field of c that f reads, or def when c is nil (a spec without
// caps) or the field is unset.
func (c *Caps) get(f func(*Caps) int, def int) int {
	if c == nil || f(c) <= 0 {
		return def
	}
	return f(c)
}

// CommandOutputBytes is caps.command_output_kb in bytes.
func (c *Caps) CommandOutputBytes() int {
	return c.get(func(c *Caps) int { return c.CommandOutputKB }, DefaultCommandOutputKB) << 10
}

// ModelResponseBytes is caps.model_response_mb in bytes.
func (c *Caps) ModelResponseBytes() int64 {
	return int64(c.get(func(c *Caps) int { return c.ModelResponseMB }, DefaultModelResponseMB)) << 20
}

// EventTextBytes is caps.event_text_kb in bytes.
func (c *Caps) EventTextBytes() int {
	return c.get(func(c *Caps) int { return c.EventTextKB }, DefaultEventTextKB) << 10
}

// TrialMemoryBytes is caps.trial_memory_mb in bytes.
func (c *Caps) TrialMemoryBytes() int64 {
	return int64(c.get(func(c *Caps) int { return c.TrialMemoryMB }, DefaultTrialMemoryMB)) << 20
}
