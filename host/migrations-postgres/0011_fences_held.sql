-- The writer writes an episode whose instance no other write of its batch
-- names without reading the instance first: the statement that writes the
-- batch updates the instance's row only where the episode's fence still
-- holds (same execution, still active, still this host's, the journal
-- length it replayed), then hands this function how many fenced rows it
-- was to update and how many it did. Short of one, it refuses the whole
-- statement, so nothing of the batch is written and no NOTIFY leaves; the
-- writer then reads and locks every instance and decides the batch again.
CREATE FUNCTION fences_held(expected BIGINT, held BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    IF held <> expected THEN
        RAISE EXCEPTION 'an episode''s instance moved on: % of % fenced instance rows held', held, expected
            USING ERRCODE = 'AH409';
    END IF;
    RETURN TRUE;
END
$$;
