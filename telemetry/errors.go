package telemetry

import "errors"

// ErrConfig marks a telemetry configuration error (an unsupported
// OTEL_EXPORTER_OTLP_PROTOCOL, say): the user's to fix, so the CLI exits 2
// rather than reporting an internal error.
var ErrConfig = errors.New("telemetry configuration")
