package spec

import "testing"

// Zero and absent caps mean the defaults; set ones convert to bytes.
func TestCapsBytes(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		caps                       *Caps
		command, eventText         int
		modelResponse, trialMemory int64
	}{
		{"absent", nil, 1 << 20, 64 << 10, 64 << 20, 16 << 20},
		{"zero", &Caps{}, 1 << 20, 64 << 10, 64 << 20, 16 << 20},
		{"set", &Caps{CommandOutputKB: 256, ModelResponseMB: 8, EventTextKB: 4, TrialMemoryMB: 1}, 256 << 10, 4 << 10, 8 << 20, 1 << 20},
		{"largest", &Caps{CommandOutputKB: MaxCommandOutputKB, ModelResponseMB: MaxModelResponseMB, EventTextKB: MaxEventTextKB, TrialMemoryMB: MaxTrialMemoryMB},
			1 << 30, 64 << 20, 4 << 30, 64 << 30},
	} {
		c := tc.caps
		if got := c.CommandOutputBytes(); got != tc.command {
			t.Errorf("%s: CommandOutputBytes = %d, want %d", tc.name, got, tc.command)
		}
		if got := c.EventTextBytes(); got != tc.eventText {
			t.Errorf("%s: EventTextBytes = %d, want %d", tc.name, got, tc.eventText)
		}
		if got := c.ModelResponseBytes(); got != tc.modelResponse {
			t.Errorf("%s: ModelResponseBytes = %d, want %d", tc.name, got, tc.modelResponse)
		}
		if got := c.TrialMemoryBytes(); got != tc.trialMemory {
			t.Errorf("%s: TrialMemoryBytes = %d, want %d", tc.name, got, tc.trialMemory)
		}
	}
}

// The bounds are inclusive: the largest value of each cap validates.
func TestCapsBoundsValidate(t *testing.T) {
	f, err := Parse("t.yaml", []byte(base+"caps: {command_output_kb: 1048576, model_response_mb: 4096, event_text_kb: 65536, trial_memory_mb: 65536}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
}
