-- The W3C trace context of the request that started a run or an instance:
-- the worker's spans for it continue that trace, on any host, after any
-- restart. NULL when traces were not exported.
ALTER TABLE runs ADD COLUMN traceparent TEXT;
ALTER TABLE instances ADD COLUMN traceparent TEXT;
