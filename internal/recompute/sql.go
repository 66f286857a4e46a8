package recompute

// The recomputes' SQL; %[1]s is the quoted catalog schema.
const (
	sqlBuildState = `SELECT state, build_kind, build_cursor FROM %[1]s.transforms WHERE id = $1`

	// Quarantine (quarantine.go).
	sqlProbe = `SELECT err_key, err_state, err_message FROM %[1]s.probe($1::text[], $2::text[], $3, $4::text[])`

	sqlQuarantineColumn = `
WITH c AS (
    UPDATE %[1]s.transforms SET spec = jsonb_set(spec, ARRAY['columns', $2, 'paused'], 'true')
    WHERE id = $1 RETURNING id)
INSERT INTO %[1]s.quarantined_columns (transform_id, column_name, error, sqlstate)
SELECT id, $3, $4, $5 FROM c
ON CONFLICT (transform_id, column_name) DO NOTHING`

	sqlQuarantineRow = `
INSERT INTO %[1]s.quarantine (transform_id, column_name, src_table, source_row, key_text, key, error, sqlstate)
VALUES ($1, $2, $3, $8, $4, $5, $6, $7)
ON CONFLICT (transform_id, column_name, src_table, source_row, key_text)
DO UPDATE SET error = EXCLUDED.error, sqlstate = EXCLUDED.sqlstate, at = clock_timestamp()`

	sqlHeldAmong = `
SELECT key_text FROM %[1]s.quarantine
WHERE transform_id = $1 AND column_name = '' AND NOT source_row AND key_text = ANY($2::text[])`

	sqlQuarantinedOf = `SELECT coalesce(array_agg(column_name ORDER BY column_name), '{}') FROM %[1]s.quarantined_columns WHERE transform_id = $1 AND error <> ''`

	sqlClearSamples = `DELETE FROM %[1]s.quarantine WHERE transform_id = $1 AND column_name = ANY($2::text[]) AND key_text = ANY($3::text[])`

	// Which of the transforms $1 hold keys; the quarantined columns by transform.
	sqlHolding = `
SELECT t FROM unnest($1::int[]) AS u(t)
WHERE EXISTS (SELECT 1 FROM %[1]s.quarantine q WHERE q.transform_id = u.t AND q.column_name = '')`
)
