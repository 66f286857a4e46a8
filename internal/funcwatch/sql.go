package funcwatch

// probeView is the temporary view a probe creates over a definition's
// query (in a savepoint it rolls back).
const probeView = "trellis_probe"

// sqlProbeView creates the probe's view (probeView, which needs no
// quoting) over the definition's query, appended (SQL the planner
// generated).
const sqlProbeView = `CREATE TEMPORARY VIEW trellis_probe AS `

// fingerprint is the digest of a pg_proc row p, NULL when there is none.
const fingerprint = `CASE WHEN p.oid IS NULL THEN NULL ELSE md5(concat_ws('|', p.prorettype, p.proretset, p.provolatile,
    p.proisstrict, p.prokind, p.prolang, p.prosrc, p.probin, p.prosqlbody::text, p.proconfig::text)) END`

const (
	// sqlDepends lists the user functions the probe view's rule depends
	// on: directly, as operators' functions, and aggregates' support
	// functions. Parameter: the view's name.
	sqlDepends = `
WITH rule AS (
    SELECT r.oid FROM pg_rewrite r WHERE r.ev_class = $1::regclass
), direct AS (
    SELECT d.refobjid AS fn FROM pg_depend d JOIN rule ON d.objid = rule.oid
    WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_proc'::regclass
    UNION
    SELECT o.oprcode::oid FROM pg_depend d JOIN rule ON d.objid = rule.oid JOIN pg_operator o ON o.oid = d.refobjid
    WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_operator'::regclass
), called AS (
    SELECT fn FROM direct
    UNION
    SELECT unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn, a.aggdeserialfn,
                        a.aggmtransfn, a.aggminvtransfn, a.aggmfinalfn]::oid[])
    FROM pg_aggregate a JOIN direct ON a.aggfnoid = direct.fn
)
SELECT p.oid, p.oid::regprocedure::text, ` + fingerprint + `
FROM pg_proc p JOIN called c ON c.fn = p.oid
WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
ORDER BY 2`

	// sqlChanged lists the transforms one of whose recorded functions was
	// replaced or dropped.
	sqlChanged = `
SELECT DISTINCT t.id FROM %[1]s.transforms t
CROSS JOIN LATERAL jsonb_array_elements(coalesce(t.spec->'functions', '[]')) f
LEFT JOIN pg_proc p ON p.oid = (f->>'oid')::oid
WHERE (` + fingerprint + `) IS DISTINCT FROM f->>'fingerprint'
ORDER BY t.id`

	// sqlViewsChanged lists the transforms one of whose recorded views
	// was replaced or dropped and is not marked changed yet (views.go).
	sqlViewsChanged = `
SELECT DISTINCT t.id FROM %[1]s.transforms t
CROSS JOIN LATERAL jsonb_array_elements(coalesce(t.spec->'views', '[]')) v
LEFT JOIN pg_class c ON c.oid = (v->>'oid')::oid AND c.relkind = 'v'
WHERE coalesce(v->>'changed', '') = ''
  AND (CASE WHEN c.oid IS NULL THEN NULL ELSE md5(pg_get_viewdef(c.oid)) END) IS DISTINCT FROM v->>'fingerprint'
ORDER BY t.id`

	// sqlViewsCurrent reads the current fingerprint of recorded views;
	// NULL for those that are gone. Parameter: their oids.
	sqlViewsCurrent = `
SELECT v.oid, CASE WHEN c.oid IS NULL THEN NULL ELSE md5(pg_get_viewdef(c.oid)) END
FROM unnest($1::oid[]) AS v(oid) LEFT JOIN pg_class c ON c.oid = v.oid AND c.relkind = 'v'`

	// sqlViewByName finds the view now named $1 ("schema.view", as
	// recorded) and its fingerprint: a view recorded in another database
	// (a schema dump loaded) has another OID there.
	sqlViewByName = `
SELECT c.oid, md5(pg_get_viewdef(c.oid))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'v' AND n.nspname || '.' || c.relname = $1`

	// sqlCurrent reads the current fingerprint of recorded functions;
	// NULL for those that are gone. Parameter: their oids.
	sqlCurrent = `
SELECT f.oid, ` + fingerprint + ` FROM unnest($1::oid[]) AS f(oid) LEFT JOIN pg_proc p ON p.oid = f.oid`

	sqlSetSpec = `UPDATE %[1]s.transforms SET spec = $2 WHERE id = $1`

	// sqlRebuild queues a rebuild of a transform that is not paused.
	sqlRebuild = `
UPDATE %[1]s.transforms SET state = 'backfilling', state_since = clock_timestamp(), build_kind = 'rebuild',
    build_cursor = NULL, build_started = NULL
WHERE id = $1 AND state <> 'paused'`

	sqlPause = `
UPDATE %[1]s.transforms SET state = 'paused', state_since = clock_timestamp(), paused_reason = $2
WHERE id = $1 AND state <> 'paused'`
)

// sqlBodies reads the bodies of functions written in SQL or PL/pgSQL
// (an SQL-standard body as its definition). Parameter: their oids.
const sqlBodies = `
SELECT p.oid::regprocedure::text, CASE WHEN p.prosqlbody IS NOT NULL THEN pg_get_functiondef(p.oid) ELSE p.prosrc END
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE p.oid = ANY ($1::oid[]) AND l.lanname IN ('sql', 'plpgsql')
ORDER BY 1`

// castTypes expands a set of type oids t0(id, oid) into t(id, oid): each
// type, its array element and its domain's base type, recursively (text
// cast to an array of an enum casts each element; a cast to a domain is
// its base type's), each with the id of the type it came from.
const castTypes = `
t(id, oid) AS (
    SELECT id, oid FROM t0 WHERE oid IS NOT NULL
    UNION
    SELECT t.id, v.x FROM t JOIN pg_catalog.pg_type ty ON ty.oid = t.oid
    CROSS JOIN LATERAL (VALUES (ty.typelem), (ty.typbasetype)) AS v(x)
    WHERE v.x <> 0
)`

// userCast is the condition on a pg_cast c (joined to its function p)
// that Trellis must not run it: to or from a text type of a type of t, by
// a function outside pg_catalog that no extension owns.
const userCast = `c.castmethod = 'f'
  AND ((c.castsource = t.oid AND c.casttarget IN ('pg_catalog.text'::pg_catalog.regtype, 'pg_catalog.varchar'::pg_catalog.regtype, 'pg_catalog.bpchar'::pg_catalog.regtype, 'pg_catalog.name'::pg_catalog.regtype))
    OR (c.casttarget = t.oid AND c.castsource IN ('pg_catalog.text'::pg_catalog.regtype, 'pg_catalog.varchar'::pg_catalog.regtype, 'pg_catalog.bpchar'::pg_catalog.regtype, 'pg_catalog.name'::pg_catalog.regtype)))
  AND p.pronamespace <> 'pg_catalog'::pg_catalog.regnamespace
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.classid = 'pg_catalog.pg_cast'::pg_catalog.regclass AND d.objid = c.oid AND d.deptype = 'e')`

// castTypeOf names a type of a pg_cast c, qualified outside pg_catalog:
// it is completed by the column (castsource or casttarget) and ")".
const castTypeOf = `(SELECT CASE WHEN y.typnamespace = 'pg_catalog'::pg_catalog.regnamespace THEN pg_catalog.format_type(y.oid, NULL) ELSE pg_catalog.quote_ident(yn.nspname) || '.' || pg_catalog.quote_ident(y.typname) END FROM pg_catalog.pg_type y JOIN pg_catalog.pg_namespace yn ON yn.oid = y.typnamespace WHERE y.oid = c.`

// castRow is the cast, its function and the function's owner, of the
// casts of t that Trellis must not run (userCast): the select list past
// what precedes it, through the WHERE condition.
const castRow = `'(' || ` + castTypeOf + `castsource) || ' AS ' || ` + castTypeOf + `casttarget) || ')',
       pg_catalog.quote_ident(pn.nspname) || '.' || pg_catalog.quote_ident(p.proname) || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')', o.rolname::pg_catalog.text
FROM t JOIN pg_catalog.pg_cast c ON c.castsource = t.oid OR c.casttarget = t.oid
JOIN pg_catalog.pg_proc p ON p.oid = c.castfunc
JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace
JOIN pg_catalog.pg_roles o ON o.oid = p.proowner
WHERE ` + userCast

const (
	// sqlUserCasts lists the casts of types $1 (names) Trellis must not
	// run: the cast, its function and the function's owner.
	sqlUserCasts = `
WITH RECURSIVE t0(id, oid) AS (
    SELECT 0, pg_catalog.to_regtype(pg_catalog.split_part(u.name, ' /*', 1)) FROM pg_catalog.unnest($1::pg_catalog.text[]) AS u(name)
), ` + castTypes + `
SELECT DISTINCT ` + castRow + `
ORDER BY 1`

	// sqlCastReaders lists the transforms that are not paused, with a cast
	// of their sources' key or captured types that Trellis must not run.
	sqlCastReaders = `
WITH RECURSIVE r AS (
    SELECT t.id, ty AS name FROM %[1]s.transforms t
    JOIN %[1]s.transform_sources ts ON ts.transform_id = t.id
    JOIN %[1]s.sources s ON s.id = ts.source_id
    CROSS JOIN LATERAL pg_catalog.unnest(s.key_types || s.cap_types) AS ty
    WHERE t.state <> 'paused'
), t0(id, oid) AS (
    SELECT DISTINCT r.id, pg_catalog.to_regtype(pg_catalog.split_part(r.name, ' /*', 1)) FROM r
), ` + castTypes + `
SELECT DISTINCT t.id, ` + castRow + `
ORDER BY 1, 2`
)
