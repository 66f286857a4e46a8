package dump

// The catalog reads of a definitions dump; %[1]s is the quoted catalog
// schema. They run in one repeatable-read transaction.
const (
	sqlHistory  = `SELECT version, name, applied_at FROM %[1]s.schema_migrations ORDER BY version`
	sqlInstance = `SELECT catalog_schema, target_schema, created_at FROM %[1]s.trellis_instance`
	sqlRing     = `SELECT nsegs FROM %[1]s.ring`

	// Every source, also one no transform reads any more: its capture
	// triggers are in the dump, and the worker on the loaded database
	// removes them once it sees no reader.
	sqlSources = `
SELECT id, schema_name, table_name, key_columns, key_types, cap_columns, cap_types, partitioned
FROM %[1]s.sources ORDER BY id`

	// The definitions, oldest first, each column of the spec unpaused: a
	// dumped transform loads as a define commits it.
	sqlTransforms = `
SELECT t.id, t.target_schema, t.target_name, t.statement,
       CASE WHEN jsonb_typeof(t.spec->'columns') = 'array'
            THEN jsonb_set(t.spec, '{columns}',
                 (SELECT coalesce(jsonb_agg(c.col - 'paused' ORDER BY c.n), '[]'::jsonb)
                  FROM jsonb_array_elements(t.spec->'columns') WITH ORDINALITY AS c(col, n)))
            ELSE t.spec END::text,
       t.created_at
FROM %[1]s.transforms t ORDER BY t.created_at, t.id`

	sqlLinks = `SELECT transform_id, source_id FROM %[1]s.transform_sources ORDER BY transform_id, source_id`

	// Where the catalog's id sequences stand (NULL when never used), so
	// ids given after the load do not collide with the dumped ones.
	sqlSequences = `
SELECT pg_sequence_last_value(pg_get_serial_sequence($1, 'id')::regclass),
       pg_sequence_last_value(pg_get_serial_sequence($2, 'id')::regclass)`
)
