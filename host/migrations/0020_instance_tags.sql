-- The tags a Durable Task client gave an orchestration when it started it
-- (`CreateInstanceRequest.tags`), a JSON object of strings, read back in
-- the instance's state. NULL: none. A restart keeps them.
ALTER TABLE instances ADD COLUMN tags TEXT;
