-- An instance's inbox is taken in the order its rows were written. Row ids
-- cannot say so on a shared hub: each host's writer draws them from a block
-- of the sequence it reserved ahead (so that a batch's statement carries
-- them), and one host's block sorts before another's whatever the order of
-- commits. `arrival` is drawn from its own sequence as the row is inserted:
-- an event raised after another one was acknowledged, through any host,
-- comes after it. Rows already there keep their id's order.
CREATE SEQUENCE inbox_arrival;
ALTER TABLE inbox ADD COLUMN arrival BIGINT;
UPDATE inbox SET arrival = id;
SELECT setval('inbox_arrival', GREATEST((SELECT MAX(id) FROM inbox), 1));
ALTER TABLE inbox ALTER COLUMN arrival SET DEFAULT nextval('inbox_arrival');
ALTER TABLE inbox ALTER COLUMN arrival SET NOT NULL;
ALTER SEQUENCE inbox_arrival OWNED BY inbox.arrival;
