-- 0001: runs, trials, events, scores and artifacts.
--
-- Times are UTC text in a fixed-width RFC 3339 form (see timeLayout in
-- store.go), so they sort as text and stay readable in the sqlite3 shell.
-- JSON columns hold valid JSON or NULL.

CREATE TABLE runs (
	id          TEXT PRIMARY KEY,
	name        TEXT NOT NULL DEFAULT '',
	spec        TEXT NOT NULL DEFAULT '{}',
	spec_path   TEXT NOT NULL DEFAULT '',
	status      TEXT NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'failed')),
	created_at  TEXT NOT NULL,
	finished_at TEXT,
	summary     TEXT,
	error       TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);

-- A trial is one attempt-able execution of one record. status is the
-- lifecycle (pending, running, finished, errored); passed is the verdict of a
-- finished trial, NULL when there is none (no checker, or errored).
CREATE TABLE trials (
	id            TEXT PRIMARY KEY,
	run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	record_id     TEXT NOT NULL,
	trial         INTEGER NOT NULL CHECK (trial >= 0),
	attempt       INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
	status        TEXT NOT NULL CHECK (status IN ('pending', 'running', 'finished', 'errored')),
	passed        INTEGER CHECK (passed IN (0, 1)),
	error_kind    TEXT NOT NULL DEFAULT '',
	error         TEXT NOT NULL DEFAULT '',
	record        TEXT,
	output        TEXT,
	output_blob   TEXT,
	isolation     TEXT,
	input_tokens  INTEGER NOT NULL DEFAULT 0,
	output_tokens INTEGER NOT NULL DEFAULT 0,
	cost_usd      REAL NOT NULL DEFAULT 0,
	created_at    TEXT NOT NULL,
	started_at    TEXT,
	finished_at   TEXT,
	UNIQUE (run_id, record_id, trial)
) STRICT;

CREATE INDEX trials_by_status ON trials (run_id, status);

-- payload is the event's JSON; when it is larger than the inline limit it
-- lives in a blob instead and payload_blob holds the digest.
CREATE TABLE events (
	trial_id     TEXT NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
	seq          INTEGER NOT NULL CHECK (seq > 0),
	kind         TEXT NOT NULL,
	time         TEXT NOT NULL,
	payload      TEXT,
	payload_blob TEXT,
	CHECK ((payload IS NULL) <> (payload_blob IS NULL)),
	PRIMARY KEY (trial_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE scores (
	trial_id TEXT NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
	name     TEXT NOT NULL,
	value    REAL NOT NULL,
	details  TEXT,
	PRIMARY KEY (trial_id, name)
) STRICT, WITHOUT ROWID;

CREATE TABLE artifacts (
	trial_id   TEXT NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
	name       TEXT NOT NULL,
	digest     TEXT NOT NULL,
	size       INTEGER NOT NULL,
	media_type TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (trial_id, name)
) STRICT, WITHOUT ROWID;
