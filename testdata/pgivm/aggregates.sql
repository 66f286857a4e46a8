-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
-- transform
TRANSFORM mv_agg FROM mv_base_a SELECT i % 2 AS m, count(*) AS n, sum(j) AS s, avg(j) AS a, min(j) AS lo, max(j) AS hi GROUP BY i % 2
-- recompute
SELECT i % 2, count(*), sum(j), avg(j), min(j), max(j) FROM mv_base_a GROUP BY i % 2
-- step
INSERT INTO mv_base_a VALUES (6, 60), (7, NULL)
-- step
UPDATE mv_base_a SET j = 5 WHERE i = 1
-- step
DELETE FROM mv_base_a WHERE i IN (2, 4, 6)
-- step
UPDATE mv_base_a SET j = NULL WHERE i % 2 = 1
-- step
DELETE FROM mv_base_a
