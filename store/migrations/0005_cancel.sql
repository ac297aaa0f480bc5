-- evalsi:foreign-keys-off
-- 0005: cancelling a run. A run's status may be 'cancelled' (its pending
-- trials will never start, its running ones lost their lease), and so may
-- an attempt's: a cancelled attempt is neither a result nor an
-- infrastructure error.
--
-- SQLite cannot change a CHECK constraint, so runs and trials are rebuilt
-- as 0004 rebuilt trials (SQLite's twelve-step ALTER TABLE procedure: the
-- first line above makes migrate.go run this file with foreign key
-- enforcement off and check foreign keys before it commits). trials keeps
-- referencing runs (id), and events, scores, artifacts and evaluations
-- trials (id), by name, so they point at the new tables.

CREATE TABLE runs_new (
	id              TEXT PRIMARY KEY,
	name            TEXT NOT NULL DEFAULT '',
	spec            TEXT NOT NULL DEFAULT '{}',
	spec_path       TEXT NOT NULL DEFAULT '',
	status          TEXT NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'failed', 'cancelled')),
	created_at      TEXT NOT NULL,
	finished_at     TEXT,
	summary         TEXT,
	error           TEXT NOT NULL DEFAULT '',
	project         TEXT NOT NULL DEFAULT '',
	max_running     INTEGER NOT NULL DEFAULT 0 CHECK (max_running >= 0),
	dataset_version TEXT NOT NULL DEFAULT ''
) STRICT;

INSERT INTO runs_new (id, name, spec, spec_path, status, created_at, finished_at, summary, error, project, max_running, dataset_version)
SELECT id, name, spec, spec_path, status, created_at, finished_at, summary, error, project, max_running, dataset_version
FROM runs;

DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
-- Leases look at running runs only, oldest first.
CREATE INDEX runs_running ON runs (created_at, id) WHERE status = 'running';
CREATE INDEX runs_by_project ON runs (project, created_at DESC, id DESC);

CREATE TABLE trials_new (
	id                  TEXT PRIMARY KEY,
	run_id              TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	record_id           TEXT NOT NULL,
	trial               INTEGER NOT NULL CHECK (trial >= 0),
	attempt             INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
	-- seq is the trial's enqueue order within the run, shared by all its
	-- attempts; leases hand trials out in seq order.
	seq                 INTEGER NOT NULL CHECK (seq >= 1),
	status              TEXT NOT NULL CHECK (status IN ('pending', 'running', 'finished', 'errored', 'lost', 'cancelled')),
	passed              INTEGER CHECK (passed IN (0, 1)),
	error_kind          TEXT NOT NULL DEFAULT '',
	error               TEXT NOT NULL DEFAULT '',
	record              TEXT,
	output              TEXT,
	output_blob         TEXT,
	isolation           TEXT,
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	cost_usd            REAL NOT NULL DEFAULT 0,
	spend_input_tokens  INTEGER NOT NULL DEFAULT 0,
	spend_output_tokens INTEGER NOT NULL DEFAULT 0,
	spend_cost_usd      REAL NOT NULL DEFAULT 0,
	-- retries_used counts earlier attempts that errored and were retried;
	-- lost_count those whose lease ran out.
	retries_used        INTEGER NOT NULL DEFAULT 0 CHECK (retries_used >= 0),
	lost_count          INTEGER NOT NULL DEFAULT 0 CHECK (lost_count >= 0),
	lease_owner         TEXT NOT NULL DEFAULT '',
	lease_until         TEXT,
	lease_epoch         INTEGER NOT NULL DEFAULT 0,
	created_at          TEXT NOT NULL,
	started_at          TEXT,
	finished_at         TEXT,
	UNIQUE (run_id, record_id, trial, attempt)
) STRICT;

INSERT INTO trials_new (id, run_id, record_id, trial, attempt, seq, status, passed, error_kind, error, record,
	output, output_blob, isolation, input_tokens, output_tokens, cost_usd,
	spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used, lost_count,
	lease_owner, lease_until, lease_epoch, created_at, started_at, finished_at)
SELECT id, run_id, record_id, trial, attempt, seq, status, passed, error_kind, error, record,
	output, output_blob, isolation, input_tokens, output_tokens, cost_usd,
	spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used, lost_count,
	lease_owner, lease_until, lease_epoch, created_at, started_at, finished_at
FROM trials;

DROP TABLE trials;
ALTER TABLE trials_new RENAME TO trials;

-- The lease query: pending attempts of one run in seq order, and the count
-- of a run's running attempts (max_running); CancelRun's unfinished
-- attempts of a run.
CREATE INDEX trials_lease ON trials (status, run_id, seq);
-- The sweeper: running attempts whose lease ended.
CREATE INDEX trials_expired ON trials (lease_until) WHERE status = 'running';
-- Listing a run's trials in enqueue order, and the next seq at Enqueue.
CREATE INDEX trials_by_seq ON trials (run_id, seq, attempt);
