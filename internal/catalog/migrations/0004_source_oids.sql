-- Sources follow their table's OID, not only its name: a table dropped and
-- created again under the same name is a new source (capture installed
-- anew), never the old one's catalog row with the old capture state.
ALTER TABLE %[1]s.sources ADD COLUMN rel_oid oid;
UPDATE %[1]s.sources SET rel_oid = to_regclass(pg_catalog.format('%%I.%%I', schema_name, table_name));
