-- The capture function catalog level 7 installed (Trellis before migration 8) for
-- source 1, public.src (id integer, read: g integer); TestUpgradeFromLevel7 puts it back.
CREATE OR REPLACE FUNCTION "trellis"."capture_1"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = 0
AS $trellis$
DECLARE
  s int;
BEGIN
  IF TG_OP = 'INSERT' THEN
    BEGIN
      SELECT r.cur INTO s FROM "trellis".ring r LEFT JOIN (SELECT FROM ONLY "trellis".ledger LIMIT 0) l ON true LEFT JOIN (SELECT nw."id" FROM trellis_new nw LIMIT 0) p ON true;
    EXCEPTION WHEN OTHERS THEN
      s := NULL;
    END;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker reports it).
    BEGIN
      INSERT INTO "trellis".ledger (seg, src, bucket, key) SELECT r.cur, 1, 0, NULL FROM "trellis".ring r;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    RETURN NULL;
  END IF;
    INSERT INTO "trellis".ledger (seg, src, bucket, key, vals)
      SELECT s, 1, pg_catalog.hashtext(c.key::pg_catalog.text) OPERATOR(pg_catalog.&) 63, c.key, c.vals FROM (SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
  ELSIF TG_OP = 'UPDATE' THEN
    BEGIN
      SELECT r.cur INTO s FROM "trellis".ring r LEFT JOIN (SELECT FROM ONLY "trellis".ledger LIMIT 0) l ON true LEFT JOIN (SELECT od."id", od."g" FROM trellis_old od LIMIT 0) p ON true;
    EXCEPTION WHEN OTHERS THEN
      s := NULL;
    END;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker reports it).
    BEGIN
      INSERT INTO "trellis".ledger (seg, src, bucket, key) SELECT r.cur, 1, 0, NULL FROM "trellis".ring r;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    RETURN NULL;
  END IF;
    INSERT INTO "trellis".ledger (seg, src, bucket, key, vals)
      SELECT s, 1, pg_catalog.hashtext(c.key::pg_catalog.text) OPERATOR(pg_catalog.&) 63, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od UNION ALL SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw WHERE NOT EXISTS (SELECT 1 FROM trellis_old o2 WHERE o2."id"::pg_catalog.text OPERATOR(pg_catalog.=) nw."id"::pg_catalog.text)) AS c(key, vals);
  ELSIF TG_OP = 'DELETE' THEN
    BEGIN
      SELECT r.cur INTO s FROM "trellis".ring r LEFT JOIN (SELECT FROM ONLY "trellis".ledger LIMIT 0) l ON true LEFT JOIN (SELECT od."id", od."g" FROM trellis_old od LIMIT 0) p ON true;
    EXCEPTION WHEN OTHERS THEN
      s := NULL;
    END;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker reports it).
    BEGIN
      INSERT INTO "trellis".ledger (seg, src, bucket, key) SELECT r.cur, 1, 0, NULL FROM "trellis".ring r;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    RETURN NULL;
  END IF;
    INSERT INTO "trellis".ledger (seg, src, bucket, key, vals)
      SELECT s, 1, pg_catalog.hashtext(c.key::pg_catalog.text) OPERATOR(pg_catalog.&) 63, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od) AS c(key, vals);
  ELSE
    s := NULL;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker reports it).
    BEGIN
      INSERT INTO "trellis".ledger (seg, src, bucket, key) SELECT r.cur, 1, 0, NULL FROM "trellis".ring r;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    RETURN NULL;
  END IF;
  END IF;
  RETURN NULL;
END
$trellis$
