-- 0002: cancelling a run (the SQLite store's migration 0005). A run's
-- status may be 'cancelled' (its pending trials will never start, its
-- running ones lost their lease), and so may an attempt's: a cancelled
-- attempt is neither a result nor an infrastructure error. The CHECK
-- constraints 0001 declared inline carry PostgreSQL's default names.
ALTER TABLE runs DROP CONSTRAINT runs_status_check,
	ADD CONSTRAINT runs_status_check CHECK (status IN ('running', 'completed', 'interrupted', 'failed', 'cancelled'));
ALTER TABLE trials DROP CONSTRAINT trials_status_check,
	ADD CONSTRAINT trials_status_check CHECK (status IN ('pending', 'running', 'finished', 'errored', 'lost', 'cancelled'));
