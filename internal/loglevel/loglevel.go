// Package loglevel names the one log level slog lacks: a notice, what a
// person at a terminal should see by default though nothing is wrong (a
// phase that will be silent for minutes), above Info's chatter and below
// Warn.
package loglevel

import "log/slog"

// Notice sits between Info and Warn; the CLI shows it by default.
const Notice = slog.LevelInfo + 2

// ReplaceAttr prints Notice as "NOTICE" rather than "INFO+2"; pass it as
// slog.HandlerOptions.ReplaceAttr.
func ReplaceAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok && l == Notice {
			a.Value = slog.StringValue("NOTICE")
		}
	}
	return a
}
