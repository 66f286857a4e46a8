-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
CREATE TABLE mv_base_b (i int PRIMARY KEY, k int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
INSERT INTO mv_base_b VALUES (1, 1), (3, 1), (4, 2);
-- transform
TRANSFORM mv_outer_agg FROM mv_base_a a LEFT JOIN mv_base_b b ON a.i = b.i SELECT b.k AS k, count(*) AS n, sum(a.j) AS s GROUP BY b.k
-- recompute
SELECT b.k, count(*), sum(a.j) FROM mv_base_a a LEFT JOIN mv_base_b b ON a.i = b.i GROUP BY b.k
-- step
INSERT INTO mv_base_b VALUES (2, 2)
-- step
INSERT INTO mv_base_b VALUES (5, 1)
-- step
UPDATE mv_base_b SET k = 3 WHERE i = 1
-- step
DELETE FROM mv_base_b WHERE i IN (3, 4)
-- step
DELETE FROM mv_base_a WHERE i = 5
