-- Raised events no orchestration code waits for yet stay in the (bounded)
-- inbox, out of the journal, until a wait takes them; parked, they no longer
-- make their instance ready on every scheduler pass.
ALTER TABLE inbox ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
