-- The leaf partitions of a partitioned source by identity, not only by
-- name: "name|oid:row versions of the pg_inherits rows attaching it". A
-- partition detached, changed and attached again under the same name gets
-- a new pg_inherits row, so it shows as changed and its readers are
-- corrected.
ALTER TABLE %[1]s.sources ADD COLUMN partition_ids text[] NOT NULL DEFAULT '{}';
