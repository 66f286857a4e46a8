package metrics

// sqlSample reads every sampled gauge in one statement; %[1]s is the
// quoted catalog schema, $1 the qualified ledger. Each part is an index
// lookup or a count over a small catalog table: not-done pages (partial
// index), quarantined columns, held keys (partial index), transforms. The
// ledger's size comes from the statistics PostgreSQL keeps, not a scan.
const sqlSample = `
SELECT (SELECT count(*) FROM %[1]s.pages WHERE NOT done),
       coalesce((SELECT extract(epoch FROM clock_timestamp() - c.cut_at)::float8 FROM %[1]s.cuts c
                 WHERE c.n = (SELECT min(cut) FROM %[1]s.pages WHERE NOT done)), 0),
       (SELECT coalesce(sum(pg_stat_get_live_tuples(i.inhrelid)), 0)::bigint FROM pg_inherits i
        WHERE i.inhparent = to_regclass($1)),
       (SELECT count(*) FROM %[1]s.quarantined_columns WHERE error <> ''),
       (SELECT count(*) FROM %[1]s.quarantine WHERE column_name = ''),
       t.waiting, t.backfilling, t.live, t.paused
FROM (SELECT count(*) FILTER (WHERE state = 'waiting_to_backfill') AS waiting,
             count(*) FILTER (WHERE state = 'backfilling') AS backfilling,
             count(*) FILTER (WHERE state = 'live') AS live,
             count(*) FILTER (WHERE state = 'paused') AS paused
      FROM %[1]s.transforms) t`
