-- The diagnosis probe takes the statements' other values (an initial
-- build's cursor) as a parameter too, so no value is ever written into SQL
-- text. Like every other statement Trellis runs on a definition, it runs
-- with its caller's rights and search_path.
DROP FUNCTION %[1]s.probe(text[], text[], boolean);
CREATE FUNCTION %[1]s.probe(qs text[], keys text[], dry boolean, bound text[])
RETURNS TABLE (err_key text[], err_state text, err_message text)
LANGUAGE plpgsql AS $probe$
DECLARE
    k text[];
    q text;
BEGIN
    IF keys IS NULL OR cardinality(keys) = 0 THEN
        RETURN;
    END IF;
    FOREACH k SLICE 1 IN ARRAY keys LOOP
        BEGIN
            FOREACH q IN ARRAY qs LOOP
                EXECUTE q USING k, bound;
            END LOOP;
            IF dry THEN
                RAISE SQLSTATE 'TR000';
            END IF;
        EXCEPTION WHEN OTHERS THEN
            IF SQLSTATE = 'TR000' THEN
                CONTINUE;
            END IF;
            IF left(SQLSTATE, 2) NOT IN ('21', '22', '23', '2F', '38', '39', '44', 'P0') AND SQLSTATE <> '54000' THEN
                RAISE;
            END IF;
            err_key := k;
            err_state := SQLSTATE;
            err_message := SQLERRM;
            RETURN NEXT;
        END;
    END LOOP;
END
$probe$;
REVOKE ALL ON FUNCTION %[1]s.probe(text[], text[], boolean, text[]) FROM PUBLIC;
