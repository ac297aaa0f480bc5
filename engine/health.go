package engine

// Health is how a run that ended reads to a person, beyond its stored
// status: a run whose every trial errored "completed" in the engine's sense
// (it ran to its end) but produced no score, and must not show as a success.
type Health string

const (
	// HealthOK: every finished trial was scored (or the run is still going).
	HealthOK Health = "ok"
	// HealthErrors: some trials errored, some were scored.
	HealthErrors Health = "errors"
	// HealthNoScores: trials ran and every one errored; nothing was scored.
	HealthNoScores Health = "no_scores"
)

// RunHealth judges a run from its counts: done is how many trials finished
// (scored or errored), errored how many of those errored.
func RunHealth(done, errored int) Health {
	switch {
	case errored == 0:
		return HealthOK
	case errored >= done:
		return HealthNoScores
	default:
		return HealthErrors
	}
}

// StatusLabel is the status a person reads: "completed with errors" for a
// completed run whose trials errored, the stored status otherwise.
func StatusLabel(status string, done, errored int) string {
	if status == StatusCompleted && RunHealth(done, errored) != HealthOK {
		return "completed with errors"
	}
	return status
}
