-- 0001: the whole schema, equivalent to the SQLite store's after its
-- migration 0004 (the trial queue). Ids use the "C" collation so a prefix
-- is a range of the primary key index and ids sort as bytes, as in SQLite.
-- JSON columns are json, not jsonb: json keeps the text exactly as written
-- (key order, spacing), which readers compare. Times are timestamptz
-- (microseconds; the SQLite store keeps nanoseconds).

CREATE TABLE runs (
	id              text COLLATE "C" PRIMARY KEY,
	name            text NOT NULL DEFAULT '',
	spec            json NOT NULL DEFAULT '{}',
	spec_path       text NOT NULL DEFAULT '',
	status          text NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'failed')),
	created_at      timestamptz NOT NULL,
	finished_at     timestamptz,
	summary         json,
	error           text NOT NULL DEFAULT '',
	project         text NOT NULL DEFAULT '',
	max_running     integer NOT NULL DEFAULT 0 CHECK (max_running >= 0),
	dataset_version text NOT NULL DEFAULT ''
);

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_project ON runs (project, created_at DESC, id DESC);
-- Leases look at running runs only, oldest first.
CREATE INDEX runs_running ON runs (created_at, id) WHERE status = 'running';

-- One row per attempt at a trial (run, record, trial index); the highest
-- attempt is the trial's current state. seq is the trial's enqueue order
-- within its run, shared by its attempts. lease_epoch is the fencing number
-- of the attempt's last lease: every leaseholder write checks it.
CREATE TABLE trials (
	id                  text COLLATE "C" PRIMARY KEY,
	run_id              text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	record_id           text NOT NULL,
	trial               integer NOT NULL CHECK (trial >= 0),
	attempt             integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
	seq                 bigint NOT NULL CHECK (seq >= 1),
	status              text NOT NULL CHECK (status IN ('pending', 'running', 'finished', 'errored', 'lost')),
	passed              boolean,
	error_kind          text NOT NULL DEFAULT '',
	error               text NOT NULL DEFAULT '',
	record              json,
	output              text,
	output_blob         text,
	isolation           json,
	input_tokens        bigint NOT NULL DEFAULT 0,
	output_tokens       bigint NOT NULL DEFAULT 0,
	cost_usd            double precision NOT NULL DEFAULT 0,
	spend_input_tokens  bigint NOT NULL DEFAULT 0,
	spend_output_tokens bigint NOT NULL DEFAULT 0,
	spend_cost_usd      double precision NOT NULL DEFAULT 0,
	retries_used        integer NOT NULL DEFAULT 0 CHECK (retries_used >= 0),
	lost_count          integer NOT NULL DEFAULT 0 CHECK (lost_count >= 0),
	lease_owner         text NOT NULL DEFAULT '',
	lease_until         timestamptz,
	lease_epoch         bigint NOT NULL DEFAULT 0,
	created_at          timestamptz NOT NULL,
	started_at          timestamptz,
	finished_at         timestamptz,
	UNIQUE (run_id, record_id, trial, attempt)
);

-- The lease query: a run's pending attempts in seq order, and the count of
-- its running attempts (max_running).
CREATE INDEX trials_lease ON trials (status, run_id, seq);
-- The sweeper: running attempts whose lease ended.
CREATE INDEX trials_expired ON trials (lease_until) WHERE status = 'running';
-- A run's trials in enqueue order.
CREATE INDEX trials_by_seq ON trials (run_id, seq, attempt);

-- Every lease takes the next number: store-wide, increasing, never reused.
CREATE SEQUENCE lease_epoch AS bigint;

-- payload is the event's JSON; when it is larger than the inline limit it
-- lives in a blob instead and payload_blob holds the digest.
CREATE TABLE events (
	trial_id     text COLLATE "C" NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
	seq          integer NOT NULL CHECK (seq > 0),
	kind         text NOT NULL,
	time         timestamptz NOT NULL,
	payload      json,
	payload_blob text,
	CHECK ((payload IS NULL) <> (payload_blob IS NULL)),
	PRIMARY KEY (trial_id, seq)
);

CREATE TABLE scores (
	trial_id text COLLATE "C" NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
	name     text COLLATE "C" NOT NULL,
	value    double precision NOT NULL,
	details  json,
	PRIMARY KEY (trial_id, name)
);

CREATE TABLE artifacts (
	trial_id   text COLLATE "C" NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
	name       text COLLATE "C" NOT NULL,
	digest     text NOT NULL,
	size       bigint NOT NULL,
	media_type text NOT NULL DEFAULT '',
	PRIMARY KEY (trial_id, name)
);

-- Per-evaluator results of a finished attempt, the JSON list the engine
-- aggregates.
CREATE TABLE evaluations (
	trial_id text COLLATE "C" PRIMARY KEY REFERENCES trials (id) ON DELETE CASCADE,
	results  json NOT NULL
);
