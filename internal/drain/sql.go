package drain

// The drain's SQL; %[1]s is the quoted catalog schema.
const (
	sqlHalt = `
UPDATE %[1]s.transforms SET state = 'paused', state_since = clock_timestamp(), paused_reason = $3,
    failure_kind = 'halt', failure_table = $2, failure_error = $3, failure_columns = '{}', failure_at = clock_timestamp()
WHERE id = $1 AND state <> 'paused'`

	// The target's columns and their types, as the table is now (none
	// when it is gone).
	sqlTargetColumns = `
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`

	// The columns of a transform's sources whose type is no longer the one
	// the source recorded (key and captured columns; $2 marks a captured
	// column no longer recorded): table, column, type now, type recorded.
	sqlSourceRetyped = `
SELECT s.schema_name || '.' || s.table_name, c.col, format_type(a.atttypid, a.atttypmod), c.typ
FROM %[1]s.transform_sources ts JOIN %[1]s.sources s ON s.id = ts.source_id
CROSS JOIN LATERAL unnest(s.key_columns || s.cap_columns, s.key_types || s.cap_types) AS c(col, typ)
JOIN pg_attribute a ON a.attrelid = to_regclass(format('%%I.%%I', s.schema_name, s.table_name))
     AND a.attname = c.col AND a.attnum > 0 AND NOT a.attisdropped
WHERE ts.transform_id = $1 AND right(c.typ, length($2)) <> $2 AND format_type(a.atttypid, a.atttypmod) <> c.typ
ORDER BY 1, 2`

	sqlSourceNames = `SELECT id, schema_name || '.' || table_name FROM %[1]s.sources WHERE id = ANY($1::int[])`

	sqlQuarantinedColumns = `SELECT transform_id, array_agg(column_name) FROM %[1]s.quarantined_columns WHERE error <> '' GROUP BY transform_id`

	// The transforms of $1 whose target is not the table they created.
	sqlMovedTargets = `
SELECT id FROM %[1]s.transforms
WHERE id = ANY($1::int[]) AND target_oid IS NOT NULL
  AND to_regclass(pg_catalog.format('%%I.%%I', target_schema, target_name)) IS DISTINCT FROM target_oid
ORDER BY id`
)
