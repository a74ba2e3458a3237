-- Each stream entry carries the attempt of the run that wrote it (when that
-- execution began, in ms): a run executed again after a crash or a take-over
-- writes a newer attempt, readers start over at it, and a late writer of an
-- older attempt is ignored. A stream's text is its newest attempt's.
ALTER TABLE stream_entries ADD COLUMN attempt BIGINT NOT NULL DEFAULT 0;
