-- evalsi:foreign-keys-off
-- 0004: the trial queue. A trial (run, record, trial index) now has one row
-- per attempt; the highest attempt is the trial's current state. Attempts
-- are leased by workers (lease_owner until lease_until, under lease_epoch,
-- a fencing number every leaseholder write is checked against), and an
-- attempt whose lease ran out is 'lost' and replaced by a new attempt.
--
-- trials is rebuilt, because SQLite cannot drop its UNIQUE (run_id,
-- record_id, trial), following SQLite's twelve-step ALTER TABLE procedure:
-- the first line above makes migrate.go run this file with foreign key
-- enforcement off (otherwise dropping the old table would cascade-delete
-- every event, score, artifact and evaluation) and check foreign keys
-- before it commits. events, scores, artifacts and evaluations keep
-- referencing trials (id) by name, so they point at the new table.

CREATE TABLE trials_new (
	id                  TEXT PRIMARY KEY,
	run_id              TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	record_id           TEXT NOT NULL,
	trial               INTEGER NOT NULL CHECK (trial >= 0),
	attempt             INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
	-- seq is the trial's enqueue order within the run, shared by all its
	-- attempts; leases hand trials out in seq order.
	seq                 INTEGER NOT NULL CHECK (seq >= 1),
	status              TEXT NOT NULL CHECK (status IN ('pending', 'running', 'finished', 'errored', 'lost')),
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

-- Existing trials keep their id and attempt; their seq is their creation
-- order within the run.
INSERT INTO trials_new (id, run_id, record_id, trial, attempt, seq, status, passed, error_kind, error, record,
	output, output_blob, isolation, input_tokens, output_tokens, cost_usd,
	spend_input_tokens, spend_output_tokens, spend_cost_usd, created_at, started_at, finished_at)
SELECT id, run_id, record_id, trial, attempt,
	row_number() OVER (PARTITION BY run_id ORDER BY created_at, id),
	status, passed, error_kind, error, record,
	output, output_blob, isolation, input_tokens, output_tokens, cost_usd,
	spend_input_tokens, spend_output_tokens, spend_cost_usd, created_at, started_at, finished_at
FROM trials;

DROP TABLE trials;
ALTER TABLE trials_new RENAME TO trials;

-- The lease query: pending attempts of one run in seq order, and the count
-- of a run's running attempts (max_running).
CREATE INDEX trials_lease ON trials (status, run_id, seq);
-- The sweeper: running attempts whose lease ended.
CREATE INDEX trials_expired ON trials (lease_until) WHERE status = 'running';
-- Listing a run's trials in enqueue order, and the next seq at Enqueue.
CREATE INDEX trials_by_seq ON trials (run_id, seq, attempt);

-- The store-wide lease epoch: every lease takes the next number.
CREATE TABLE lease_epoch (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	epoch INTEGER NOT NULL
) STRICT;
INSERT INTO lease_epoch (id, epoch) VALUES (1, 0);

-- A run's project (on a server), its cap on attempts leased at once (0: no
-- cap) and the version of the dataset it used.
ALTER TABLE runs ADD COLUMN project TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN max_running INTEGER NOT NULL DEFAULT 0 CHECK (max_running >= 0);
ALTER TABLE runs ADD COLUMN dataset_version TEXT NOT NULL DEFAULT '';
-- Leases look at running runs only, oldest first.
CREATE INDEX runs_running ON runs (created_at, id) WHERE status = 'running';
CREATE INDEX runs_by_project ON runs (project, created_at DESC, id DESC);
