package ledger

// The ledger's SQL; %[1]s is the quoted catalog schema.
const (
	sqlSnapshot = `SELECT pg_current_snapshot()::text`

	// Cuts.
	// The last cut, its age, and the snapshot of the next (the cutter
	// holds the cut lock).
	sqlLastCutAndSnapshot = `SELECT snap::text, extract(epoch FROM clock_timestamp() - cut_at) * 1000, pg_current_snapshot()::text FROM %[1]s.cuts ORDER BY n DESC LIMIT 1`

	// The pages of a cut: the new rows (committed in $2, not in $1) by
	// transaction, in xid order, gathered into ranges of about $3 rows;
	// each range's first and last xid, its rows, the segments they are in
	// (a bit each), and whether it is one transaction of more than $3 rows
	// (big), which is a page of its own (and cut into parts if it has more
	// than PageMax, sqlSplitTransaction). A range of smaller transactions
	// ends where their rows reach a multiple of $3, and before and after a
	// big one (run counts the big ones so far). The (xid) index bounds the
	// scan and orders it.
	sqlCutPages = `
SELECT min(xid)::text, max(xid)::text, sum(n)::int8, bit_or(m), bool_or(big)
FROM (SELECT xid, n, m, big, run, CASE WHEN big THEN 0 ELSE (cum - 1) / $3::int8 END AS page
      FROM (SELECT xid, n, m, n > $3::int8 AS big,
                   count(*) FILTER (WHERE n > $3::int8) OVER w AS run,
                   (sum(n) FILTER (WHERE n <= $3::int8) OVER w)::int8 AS cum
            FROM (SELECT xid, count(*) AS n, bit_or(1 << seg) AS m FROM %[1]s.ledger
                  WHERE xid >= pg_snapshot_xmin($1::pg_snapshot) AND xid < pg_snapshot_xmax($2::pg_snapshot)
                    AND pg_visible_in_snapshot(xid, $2::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)
                  GROUP BY xid) x
            WINDOW w AS (ORDER BY xid)) y) p
GROUP BY run, big, page ORDER BY min(xid)`

	// The rows of one transaction ($1, committed: all its rows are of one
	// cut) by segment and heap block, in order: the cut splits a
	// transaction of more than PageMax rows into pages of consecutive
	// blocks of one segment (decision 0042). A block holds at most a few
	// hundred rows, so the parts can be packed to at most PageMax rows.
	sqlSplitTransaction = `
SELECT seg, (ctid::text::point)[0]::int8 AS blk, count(*)::int8 FROM %[1]s.ledger
WHERE xid = $1::xid8 GROUP BY seg, blk ORDER BY seg, blk`

	// An idle worker's look (pace.go): how many pages are due, the age of
	// the last cut, and whether rows were committed since it.
	sqlOutlook = `
SELECT (SELECT count(*) FROM %[1]s.pages WHERE NOT done AND (retry_at IS NULL OR retry_at <= clock_timestamp())),
       extract(epoch FROM clock_timestamp() - c.cut_at) * 1000,
       EXISTS (SELECT 1 FROM %[1]s.ledger l
               WHERE l.xid >= pg_snapshot_xmin(c.snap) AND NOT pg_visible_in_snapshot(l.xid, c.snap))
FROM (SELECT snap, cut_at FROM %[1]s.cuts ORDER BY n DESC LIMIT 1) c`

	// A cut (snapshot $1) and its pages, in one statement: the pages'
	// first and last xids in $3 and $4, their segments (an array literal
	// each) in $5; $2 is the previous cut's snapshot. A page that is a part
	// of one transaction (decision 0042) has its segment in $6 and the
	// bounds of its rows' ctids in $7 (inclusive) and $8 (exclusive); the
	// others have NULLs there.
	sqlInsertCutAndPages = `
WITH c AS (INSERT INTO %[1]s.cuts (snap) VALUES ($1::pg_snapshot) RETURNING n)
INSERT INTO %[1]s.pages (cut, lo, hi, xlo, xhi, segs, seg, tlo, thi)
SELECT c.n, $2::pg_snapshot, $1::pg_snapshot, p.xlo::xid8, p.xhi::xid8, p.segs::int[], p.seg, p.tlo::tid, p.thi::tid
FROM c, unnest($3::text[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[]) WITH ORDINALITY AS p(xlo, xhi, segs, seg, tlo, thi, i)
ORDER BY p.i`

	// The drained frontier: the newest cut whose pages, and all older ones, are done.
	sqlFrontier = `
SELECT n, snap::text FROM %[1]s.cuts
WHERE n <= coalesce((SELECT min(cut) - 1 FROM %[1]s.pages WHERE NOT done), (SELECT max(n) FROM %[1]s.cuts))
ORDER BY n DESC LIMIT 1`

	// The oldest cut whose snapshot sees everything the token sees.
	sqlCovering = `
SELECT n FROM %[1]s.cuts c
WHERE pg_snapshot_xmax($1::pg_snapshot) <= pg_snapshot_xmax(c.snap)
  AND NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(c.snap) x
                  WHERE x < pg_snapshot_xmax($1::pg_snapshot) AND pg_visible_in_snapshot(x, $1::pg_snapshot))
ORDER BY n LIMIT 1`
	// Whether a page up to cut $1 is not done.
	sqlPagesPending = `SELECT EXISTS (SELECT 1 FROM %[1]s.pages WHERE NOT done AND cut <= $1)`
	// Whether a page up to cut $1 that is not done holds changes of the
	// sources $2. A part of a transaction (decision 0042) is taken to hold
	// every row of its transaction: a wait for a source the transaction
	// changed ends once all its parts are done, and the test stops at the
	// transaction's first row of those sources rather than reading its
	// rows up to the part's.
	sqlSourcesPending = `
SELECT EXISTS (
  SELECT 1 FROM %[1]s.pages p
  WHERE NOT p.done AND p.cut <= $1
    AND EXISTS (SELECT 1 FROM %[1]s.ledger l
                WHERE l.src = ANY ($2::int[])
                  AND l.xid >= coalesce(p.xlo, pg_snapshot_xmin(p.lo)) AND l.xid < pg_snapshot_xmax(p.hi)
                  AND l.xid <= coalesce(p.xhi, pg_snapshot_xmax(p.hi)) AND (p.buckets IS NULL OR l.bucket = ANY (p.buckets))
                  AND pg_visible_in_snapshot(l.xid, p.hi) AND NOT pg_visible_in_snapshot(l.xid, p.lo)))`

	// The ring (ring.go); %[2]s is a quoted segment name.
	// The segment writers that start now append to (%[2]s, SegmentAt),
	// and the ring's size.
	sqlRing             = `SELECT %[2]s, nsegs FROM %[1]s.ring`
	sqlSegmentHasRows   = `SELECT EXISTS (SELECT 1 FROM %[1]s.%[2]s)`
	sqlSegmentUndrained = `SELECT EXISTS (SELECT 1 FROM %[1]s.%[2]s WHERE NOT pg_visible_in_snapshot(xid, $1::pg_snapshot))`
	sqlLockSegment      = `LOCK TABLE %[1]s.%[2]s IN ACCESS EXCLUSIVE MODE`
	sqlTruncateSegment  = `TRUNCATE %[1]s.%[2]s`
	sqlPrunePages       = `DELETE FROM %[1]s.pages WHERE done AND cut <= $1`
	sqlPruneCuts        = `DELETE FROM %[1]s.cuts WHERE n < $1`

	// Each segment of the ring: whether a table of its name exists in the
	// catalog schema ($1, unquoted), and whether it is a partition of the
	// ledger (segments.go). The ring has one row (LIMIT 1: never analyzed,
	// it would be planned as 1,810 rows, and the statement JIT-compiled).
	sqlSegmentStates = `
SELECT i, to_regclass(pg_catalog.format('%%I.%%I', $1::text, 'ledger_' || i)) IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_catalog.pg_inherits h
               WHERE h.inhrelid = to_regclass(pg_catalog.format('%%I.%%I', $1::text, 'ledger_' || i))
                 AND h.inhparent = to_regclass(pg_catalog.format('%%I.%%I', $1::text, 'ledger')))
FROM (SELECT nsegs FROM %[1]s.ring LIMIT 1) r, generate_series(0, r.nsegs - 1) i ORDER BY i`
	// %[3]s is the segment's number.
	sqlCreateSegment = `CREATE TABLE IF NOT EXISTS %[1]s.%[2]s (LIKE %[1]s.ledger INCLUDING DEFAULTS)`
	sqlAttachSegment = `ALTER TABLE %[1]s.ledger ATTACH PARTITION %[1]s.%[2]s FOR VALUES IN (%[3]s)`
	// A repair's second re-derive (segments.go): noted, then the snapshot
	// of the transactions to wait for, then done once they all ended.
	sqlNoteRepair  = `UPDATE %[1]s.ring SET repair_pending = true, repair_snap = NULL`
	sqlRepairState = `SELECT repair_pending, repair_snap IS NOT NULL,
       coalesce(pg_snapshot_xmin(pg_current_snapshot()) >= pg_snapshot_xmax(repair_snap), false) FROM %[1]s.ring`
	sqlRepairSnapshot = `UPDATE %[1]s.ring SET repair_snap = pg_current_snapshot() WHERE repair_pending`
	sqlRepairDone     = `UPDATE %[1]s.ring SET repair_pending = false, repair_snap = NULL`

	// Pages (page.go).
	sqlClaim = `
SELECT id, lo::text, hi::text, xlo::text, xhi::text, buckets, segs, seg, tlo::text, thi::text, attempts, (SELECT gen FROM %[1]s.trellis_instance) FROM %[1]s.pages
WHERE NOT done AND (retry_at IS NULL OR retry_at <= clock_timestamp())
ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`

	// The rows of a page: committed in hi, not in lo, with an xid in the
	// page's range [$5, $6]; a page cut by an older release has no range
	// (rows below lo's xmin are all visible in lo, rows at or above hi's
	// xmax are in no snapshot of the page) and lists buckets ($3) instead.
	// The (xid) index bounds the scan at both ends of the range (written
	// as coalesces, not ORs, so that a generic plan bounds it too: the
	// upper end was a filter, and a cut's first page read the rows of all
	// its later ones). Each row's bucket is computed here
	// from its key (capture writes none); a row that carries one (written
	// by an older capture, or by anyone with the ledger's INSERT right) is
	// checked against it. %[2]s is the relation read: the ledger, or only
	// the page's segments (pageSegments), so that the page locks no other
	// segment.
	sqlPageKeys = `
SELECT src, key, vals, h, bucket IS NOT NULL AND bucket IS DISTINCT FROM h
FROM (SELECT src, key, vals, bucket, coalesce(hashtext(key::text) & $4, 0) AS h
      FROM %[2]s l
      WHERE xid >= coalesce($5::xid8, pg_snapshot_xmin($1::pg_snapshot)) AND xid < pg_snapshot_xmax($2::pg_snapshot)
        AND xid <= coalesce($6::xid8, pg_snapshot_xmax($2::pg_snapshot)) AND ($3::int[] IS NULL OR bucket = ANY ($3::int[]))
        AND pg_visible_in_snapshot(xid, $2::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)
      OFFSET 0) r`

	// The rows of a page that is a part of one transaction ($6; decision
	// 0042): those of one segment (%[2]s, a quoted segment name) in the
	// heap blocks from tid $4 up to tid $5, committed in hi ($2) and not in
	// lo ($1), as sqlPageKeys reads them. The inner scan has only the ctid
	// bounds (the OFFSET keeps the xid test out of it), so it is a TID range
	// scan of those blocks: through the (xid) index, each part would read
	// every row of the transaction.
	sqlPartKeys = `
SELECT src, key, vals, h, bucket IS NOT NULL AND bucket IS DISTINCT FROM h
FROM (SELECT src, key, vals, bucket, coalesce(hashtext(key::text) & $3, 0) AS h
      FROM (SELECT xid, src, bucket, key, vals FROM %[1]s.%[2]s WHERE ctid >= $4::tid AND ctid < $5::tid OFFSET 0) l
      WHERE xid = $6::xid8
        AND pg_visible_in_snapshot(xid, $2::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)
      OFFSET 0) r`

	// One segment's rows, a part of a page's segments (pageSegments).
	sqlSegmentRows = `SELECT seg, xid, src, bucket, key, vals FROM %[1]s.%[2]s`
	sqlAllSegments = `%[1]s.ledger`

	sqlPageDone = `UPDATE %[1]s.pages SET done = true, retry_at = NULL WHERE id = $1`

	sqlPageFailed = `
UPDATE %[1]s.pages SET attempts = attempts + 1,
    first_failed = coalesce(first_failed, clock_timestamp()), last_failed = clock_timestamp(),
    last_error = $2, last_sqlstate = $3, tables = $4,
    retry_at = clock_timestamp() + $5 * interval '1 millisecond'
WHERE id = $1`

	sqlClaimPage = `
SELECT id, lo::text, hi::text, xlo::text, xhi::text, buckets, segs, seg, tlo::text, thi::text, attempts, (SELECT gen FROM %[1]s.trellis_instance) FROM %[1]s.pages
WHERE id = $1 AND NOT done FOR UPDATE SKIP LOCKED`

	// The changes of the sources $1 that the snapshot sees committed and
	// not applied: past the frontier ($2), and in no page that is done (a
	// page that is a part of one transaction holds only the rows of its
	// segment and ctid range).
	sqlInFlight = `
SELECT l.src, l.key, l.vals FROM %[1]s.ledger l
WHERE l.src = ANY ($1::int[])
  AND NOT coalesce(pg_visible_in_snapshot(l.xid, $2::pg_snapshot), false)
  AND NOT EXISTS (SELECT 1 FROM %[1]s.pages p
                  WHERE p.done AND (p.buckets IS NULL OR l.bucket = ANY (p.buckets))
                    AND (p.xlo IS NULL OR l.xid BETWEEN p.xlo AND p.xhi)
                    AND (p.tlo IS NULL OR (l.seg = p.seg AND l.ctid >= p.tlo AND l.ctid < p.thi))
                    AND pg_visible_in_snapshot(l.xid, p.hi) AND NOT pg_visible_in_snapshot(l.xid, p.lo))
GROUP BY l.src, l.key, l.vals`

	// A change of one key of the captured table $1 (schema.table), as its
	// capture would append it (with no bucket).
	sqlRestage = `
INSERT INTO %[1]s.ledger (seg, src, key)
SELECT r.cur, s.id, $2::text[]
FROM %[1]s.ring r, %[1]s.sources s WHERE s.schema_name || '.' || s.table_name = $1`

	// The pages not done that failed, holding changes of one of the tables
	// $1, oldest first; at most $2 (NULL: all).
	sqlFailing = `
SELECT p.id, coalesce(p.tables, '{}'), coalesce(p.last_error, ''), p.last_sqlstate, p.first_failed, p.last_failed, p.attempts
FROM %[1]s.pages p
WHERE NOT p.done AND p.attempts > 0 AND p.tables && $1::text[]
ORDER BY p.id LIMIT $2`
)

// Pending work (pending.go). reach pairs each transform with every source
// it depends on, through chains of targets read as sources; bysrc counts
// each source's changes, a key once per transaction (an update appends its
// old and its new row), in pages not yet applied (each page's rows
// are those committed in hi and not in lo, in its xid range, or its
// buckets for a page an older release cut; they committed after the
// previous cut was taken) and those committed since the last cut. The keys are
// made distinct by a GROUP BY, which can hash them, not by count(DISTINCT),
// which sorts them (arrays of text, by collation): on a backlog of 100,000
// rows that was a second of the staging worker's every metrics sample.
// The parts of one transaction (decision 0042) not done are joined once, as
// the whole transaction: its changes count until its last part is done
// (joining each part would read all its rows once per part).
const sqlPendingWork = `
WITH RECURSIVE reach (transform_id, source_id) AS (
    SELECT transform_id, source_id FROM %[1]s.transform_sources
    UNION
    SELECT r.transform_id, ts.source_id
    FROM reach r
    JOIN %[1]s.sources s ON s.id = r.source_id
    JOIN %[1]s.transforms u ON u.target_schema = s.schema_name AND u.target_name = s.table_name
    JOIN %[1]s.transform_sources ts ON ts.transform_id = u.id
),
bysrc AS (
    SELECT src, count(*) AS n, min(since) AS since FROM (
        SELECT l.src, min(coalesce(prev.cut_at, c.cut_at)) AS since
        FROM %[1]s.pages p
        JOIN %[1]s.cuts c ON c.n = p.cut
        LEFT JOIN LATERAL (SELECT pc.cut_at FROM %[1]s.cuts pc WHERE pc.n < p.cut ORDER BY pc.n DESC LIMIT 1) prev ON true
        JOIN %[1]s.ledger l ON l.xid >= coalesce(p.xlo, pg_snapshot_xmin(p.lo)) AND l.xid < pg_snapshot_xmax(p.hi)
            AND l.xid <= coalesce(p.xhi, pg_snapshot_xmax(p.hi)) AND (p.buckets IS NULL OR l.bucket = ANY (p.buckets))
            AND pg_visible_in_snapshot(l.xid, p.hi) AND NOT pg_visible_in_snapshot(l.xid, p.lo)
        WHERE NOT p.done
          AND (p.tlo IS NULL OR p.id = (SELECT min(q.id) FROM %[1]s.pages q
                                        WHERE NOT q.done AND q.cut = p.cut AND q.xlo = p.xlo AND q.tlo IS NOT NULL))
        GROUP BY l.src, l.xid, l.key) paged
    GROUP BY src
    UNION ALL
    SELECT src, count(*), min(since) FROM (
        SELECT l.src, min(last.cut_at) AS since
        FROM (SELECT snap, cut_at FROM %[1]s.cuts ORDER BY n DESC LIMIT 1) last
        JOIN %[1]s.ledger l ON l.xid >= pg_snapshot_xmin(last.snap) AND NOT pg_visible_in_snapshot(l.xid, last.snap)
        GROUP BY l.src, l.xid, l.key) uncut
    GROUP BY src
)
SELECT t.id, t.target_schema, t.target_name, t.state, coalesce(sum(b.n), 0)::int8,
       coalesce((extract(epoch FROM clock_timestamp() - min(b.since)) * 1000000)::int8, 0)
FROM %[1]s.transforms t
LEFT JOIN reach r ON r.transform_id = t.id
LEFT JOIN bysrc b ON b.src = r.source_id
WHERE $1 = 0 OR t.id = $1
GROUP BY t.id
ORDER BY t.target_schema, t.target_name`
