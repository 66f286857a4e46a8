package catalog

// The catalog package's SQL, in the project's one convention: %[1]s is the
// quoted catalog schema, filled in by Catalog.SQL (further quoted
// identifiers, where a statement has any, are %[2]s and on); values are
// always parameters.
const (
	sqlSchemaState = `
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = $1 AND c.relname = 'schema_migrations'),
       (SELECT count(*)::int FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)`

	sqlCreateHistory = `
CREATE SCHEMA IF NOT EXISTS %[1]s;
CREATE TABLE %[1]s.schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	sqlMaxVersion    = `SELECT coalesce(max(version), 0) FROM %[1]s.schema_migrations`
	sqlInsertHistory = `INSERT INTO %[1]s.schema_migrations (version, name) VALUES ($1, $2)`

	sqlInsertInstance       = `INSERT INTO %[1]s.trellis_instance (catalog_schema, target_schema) VALUES ($1, $2)`
	sqlUpdateInstanceTarget = `UPDATE %[1]s.trellis_instance SET target_schema = $1 WHERE target_schema <> $1`

	sqlFindMarkers = `
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'trellis_instance' AND c.relkind = 'r' AND c.relpersistence <> 't' ORDER BY 1`
	sqlReadMarker = `SELECT catalog_schema, target_schema FROM %[1]s.trellis_instance`
)

// Runtime catalog statements.
const (
	sqlGen     = `SELECT gen FROM %[1]s.trellis_instance`
	sqlBumpGen = `UPDATE %[1]s.trellis_instance SET gen = gen + 1`

	sqlTransforms = `
SELECT t.id, t.target_schema, t.target_name, t.statement, t.spec, t.state, t.state_since,
       t.paused_reason, t.build_kind, t.build_cursor, t.build_rows, t.created_at,
       t.failure_kind, t.failure_table, t.failure_error, t.failure_columns, t.failure_at,
       t.build_attempts, t.build_error, t.build_next_at
FROM %[1]s.transforms t`

	sqlSources = `
SELECT id, schema_name, table_name, key_columns, key_types, cap_columns, cap_types, partitioned, partitions, capture_state
FROM %[1]s.sources ORDER BY id`
)

// The operators of key types, for plan.Op (decision 0030).
const (
	// For each type name of $1 whose default btree operator class (of its
	// base type, for a domain) has an = outside pg_catalog: the name, the
	// schema of that = and the type it takes. Operator classes are the
	// superuser's or an extension's, and are found by OID, never by a
	// search_path.
	sqlKeyOps = `
SELECT u.name, n.nspname::text, pg_catalog.format_type(c.opcintype, NULL)
FROM pg_catalog.unnest($1::text[]) AS u(name)
JOIN pg_catalog.pg_type ty ON ty.oid = pg_catalog.to_regtype(u.name)
JOIN pg_catalog.pg_opclass c ON c.opcdefault
     AND c.opcmethod = (SELECT a.oid FROM pg_catalog.pg_am a WHERE a.amname = 'btree')
     AND c.opcintype = CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END
JOIN pg_catalog.pg_amop ao ON ao.amopfamily = c.opcfamily AND ao.amopmethod = c.opcmethod
     AND ao.amoplefttype = c.opcintype AND ao.amoprighttype = c.opcintype AND ao.amopstrategy = 3
JOIN pg_catalog.pg_operator o ON o.oid = ao.amopopr
JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
WHERE n.nspname <> 'pg_catalog'`
	// The types of columns $3 of tables $1.$2 (a stored definition's ON
	// columns); a column not found has none.
	sqlColumnTypes = `
SELECT u.s, u.t, u.c, pg_catalog.format_type(a.atttypid, a.atttypmod)
FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS u(s, t, c)
JOIN pg_catalog.pg_namespace n ON n.nspname = u.s
JOIN pg_catalog.pg_class r ON r.relnamespace = n.oid AND r.relname = u.t
JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid AND a.attname = u.c AND a.attnum > 0 AND NOT a.attisdropped`
)
