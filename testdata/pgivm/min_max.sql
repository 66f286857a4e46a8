-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int, k int);
INSERT INTO mv_base_a SELECT g, g % 3, g FROM generate_series(1, 12) g;
-- transform
TRANSFORM mv_minmax FROM mv_base_a SELECT j AS j, min(k) AS lo, max(k) AS hi GROUP BY j
-- recompute
SELECT j, min(k), max(k) FROM mv_base_a GROUP BY j
-- step
DELETE FROM mv_base_a WHERE k IN (1, 12)
-- step
UPDATE mv_base_a SET k = 100 WHERE i = 5
-- step
UPDATE mv_base_a SET k = -1 WHERE i = 6
-- step
DELETE FROM mv_base_a WHERE j = 0
