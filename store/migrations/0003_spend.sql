-- 0003: what every attempt of a trial spent, errored and retried attempts
-- included (input_tokens, output_tokens and cost_usd are the final
-- attempt's), so a run's total spend survives resume.
ALTER TABLE trials ADD COLUMN spend_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN spend_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN spend_cost_usd REAL NOT NULL DEFAULT 0;
