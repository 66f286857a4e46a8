-- The capture function catalog level 12 installed (Trellis before migration 13: it read
-- ring.cur for its segment) for source 1, public.src (id integer, read: g integer);
-- TestUpgradeToClockSegments puts it back.
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
      SELECT r.cur INTO s FROM "trellis".ring r;
      IF s = 0 THEN
        PERFORM FROM ONLY "trellis"."ledger_0" l, (SELECT nw."id" FROM trellis_new nw) p WHERE false;
      ELSIF s = 1 THEN
        PERFORM FROM ONLY "trellis"."ledger_1" l, (SELECT nw."id" FROM trellis_new nw) p WHERE false;
      ELSIF s = 2 THEN
        PERFORM FROM ONLY "trellis"."ledger_2" l, (SELECT nw."id" FROM trellis_new nw) p WHERE false;
      ELSIF s = 3 THEN
        PERFORM FROM ONLY "trellis"."ledger_3" l, (SELECT nw."id" FROM trellis_new nw) p WHERE false;
      ELSE
        s := NULL;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      s := NULL;
    END;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker repairs the ledger and re-reads every table).
    BEGIN
      INSERT INTO "trellis".ledger (seg, src, bucket, key) SELECT r.cur, 1, 0, NULL FROM "trellis".ring r;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    RETURN NULL;
  END IF;
    IF s = 0 THEN
      INSERT INTO "trellis"."ledger_0" (seg, src, key, vals)
        SELECT 0, 1, c.key, c.vals FROM (SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSIF s = 1 THEN
      INSERT INTO "trellis"."ledger_1" (seg, src, key, vals)
        SELECT 1, 1, c.key, c.vals FROM (SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSIF s = 2 THEN
      INSERT INTO "trellis"."ledger_2" (seg, src, key, vals)
        SELECT 2, 1, c.key, c.vals FROM (SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSIF s = 3 THEN
      INSERT INTO "trellis"."ledger_3" (seg, src, key, vals)
        SELECT 3, 1, c.key, c.vals FROM (SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSE
      s := NULL;
    END IF;

  ELSIF TG_OP = 'UPDATE' THEN
    BEGIN
      SELECT r.cur INTO s FROM "trellis".ring r;
      IF s = 0 THEN
        PERFORM FROM ONLY "trellis"."ledger_0" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSIF s = 1 THEN
        PERFORM FROM ONLY "trellis"."ledger_1" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSIF s = 2 THEN
        PERFORM FROM ONLY "trellis"."ledger_2" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSIF s = 3 THEN
        PERFORM FROM ONLY "trellis"."ledger_3" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSE
        s := NULL;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      s := NULL;
    END;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker repairs the ledger and re-reads every table).
    BEGIN
      INSERT INTO "trellis".ledger (seg, src, bucket, key) SELECT r.cur, 1, 0, NULL FROM "trellis".ring r;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    RETURN NULL;
  END IF;
    IF s = 0 THEN
      INSERT INTO "trellis"."ledger_0" (seg, src, key, vals)
        SELECT 0, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od UNION ALL SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSIF s = 1 THEN
      INSERT INTO "trellis"."ledger_1" (seg, src, key, vals)
        SELECT 1, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od UNION ALL SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSIF s = 2 THEN
      INSERT INTO "trellis"."ledger_2" (seg, src, key, vals)
        SELECT 2, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od UNION ALL SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSIF s = 3 THEN
      INSERT INTO "trellis"."ledger_3" (seg, src, key, vals)
        SELECT 3, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od UNION ALL SELECT ARRAY[nw."id"::pg_catalog.text], NULL::pg_catalog.text[] FROM trellis_new nw) AS c(key, vals);
    ELSE
      s := NULL;
    END IF;

  ELSIF TG_OP = 'DELETE' THEN
    BEGIN
      SELECT r.cur INTO s FROM "trellis".ring r;
      IF s = 0 THEN
        PERFORM FROM ONLY "trellis"."ledger_0" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSIF s = 1 THEN
        PERFORM FROM ONLY "trellis"."ledger_1" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSIF s = 2 THEN
        PERFORM FROM ONLY "trellis"."ledger_2" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSIF s = 3 THEN
        PERFORM FROM ONLY "trellis"."ledger_3" l, (SELECT od."id", od."g" FROM trellis_old od) p WHERE false;
      ELSE
        s := NULL;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      s := NULL;
    END;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker repairs the ledger and re-reads every table).
    BEGIN
      INSERT INTO "trellis".ledger (seg, src, bucket, key) SELECT r.cur, 1, 0, NULL FROM "trellis".ring r;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    RETURN NULL;
  END IF;
    IF s = 0 THEN
      INSERT INTO "trellis"."ledger_0" (seg, src, key, vals)
        SELECT 0, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od) AS c(key, vals);
    ELSIF s = 1 THEN
      INSERT INTO "trellis"."ledger_1" (seg, src, key, vals)
        SELECT 1, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od) AS c(key, vals);
    ELSIF s = 2 THEN
      INSERT INTO "trellis"."ledger_2" (seg, src, key, vals)
        SELECT 2, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od) AS c(key, vals);
    ELSIF s = 3 THEN
      INSERT INTO "trellis"."ledger_3" (seg, src, key, vals)
        SELECT 3, 1, c.key, c.vals FROM (SELECT ARRAY[od."id"::pg_catalog.text], ARRAY[od."g"::pg_catalog.text] FROM trellis_old od) AS c(key, vals);
    ELSE
      s := NULL;
    END IF;

  ELSE
    s := NULL;
  IF s IS NULL THEN
    -- Capture cannot read this statement's rows: record that the table
    -- must be re-read. A catalog too damaged for that records nothing
    -- (the staging worker repairs the ledger and re-reads every table).
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
$trellis$;
