-- The leaf partitions of a partitioned source by identity, not only by
-- name: "name|oid:clone trigger oids". A partition detached, changed and
-- attached again under the same name gets new clones of the capture
-- triggers, so it shows as changed and its readers are corrected.
ALTER TABLE %[1]s.sources ADD COLUMN partition_ids text[] NOT NULL DEFAULT '{}';
