-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int, k text);
INSERT INTO mv_base_a VALUES (1, 1, 'x'), (2, 1, NULL), (3, NULL, 'y'), (4, NULL, NULL), (5, 2, 'x');
-- transform
TRANSFORM mv_nulls FROM mv_base_a SELECT j AS j, count(*) AS n, count(k) AS nk, count(DISTINCT k) AS dk, string_agg(k, ',' ORDER BY k) AS ks GROUP BY j
-- recompute
SELECT j, count(*), count(k), count(DISTINCT k), string_agg(k, ',' ORDER BY k) FROM mv_base_a GROUP BY j
-- step
UPDATE mv_base_a SET j = NULL WHERE i = 1
-- step
UPDATE mv_base_a SET k = 'z' WHERE k IS NULL
-- step
DELETE FROM mv_base_a WHERE j IS NULL
-- step
INSERT INTO mv_base_a VALUES (6, NULL, NULL)
