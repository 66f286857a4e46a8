-- Targets are tracked by OID: a target renamed, or dropped and replaced by
-- another table under its name, is noticed (its transform halts), and
-- DROP TRANSFORM drops only the table Trellis created.
ALTER TABLE %[1]s.transforms ADD COLUMN target_oid oid;
UPDATE %[1]s.transforms SET target_oid = to_regclass(pg_catalog.format('%%I.%%I', target_schema, target_name));
