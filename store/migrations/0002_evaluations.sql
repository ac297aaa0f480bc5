-- 0002: per-evaluator results of a finished trial, as the JSON list the
-- engine aggregates ([{evaluator, scores, error}], in spec order). The
-- scores table keeps the flat scores for queries; this keeps which
-- evaluator reported them and which evaluator failed, so a resumed run can
-- aggregate its earlier trials exactly as if they had just run.
CREATE TABLE evaluations (
	trial_id TEXT PRIMARY KEY REFERENCES trials (id) ON DELETE CASCADE,
	results  TEXT NOT NULL
) STRICT, WITHOUT ROWID;
