-- Only Trellis writes its catalog. Capture functions run with the catalog
-- owner's rights (SECURITY DEFINER, a pinned search_path), so writers of
-- captured tables need no right on the catalog, and no other role may read
-- or append to the ledger, read the ring, or call the catalog's functions.
REVOKE ALL ON SCHEMA %[1]s FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA %[1]s FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA %[1]s FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %[1]s FROM PUBLIC;
ALTER FUNCTION %[1]s.probe(text[], text[], boolean) SET search_path = pg_catalog, pg_temp;

-- Capture installed by an older Trellis ran with the writer's rights: it
-- keeps working with the owner's until the staging worker reinstalls it
-- (every installed source is reinstalled once, its fingerprint anew).
DO $trellis_migrate$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
             WHERE p.pronamespace = '%[1]s'::regnamespace AND p.proname LIKE 'capture\_%%' AND p.pronargs = 0 LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %%s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', f);
    END LOOP;
END
$trellis_migrate$;
UPDATE %[1]s.sources SET capture_state = 'pending' WHERE capture_state = 'installed' AND disrupted_at IS NULL;
