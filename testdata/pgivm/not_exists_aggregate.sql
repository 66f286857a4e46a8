-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
CREATE TABLE mv_base_b (i int PRIMARY KEY, k int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
INSERT INTO mv_base_b VALUES (1, 101), (3, 103);
-- transform
TRANSFORM mv_not_exists FROM mv_base_a a SELECT a.j % 20 AS m, count(*) AS n, sum(a.j) AS total WHERE NOT EXISTS (SELECT 1 FROM mv_base_b b WHERE b.i = a.i) GROUP BY a.j % 20
-- recompute
SELECT a.j % 20, count(*), sum(a.j) FROM mv_base_a a WHERE NOT EXISTS (SELECT 1 FROM mv_base_b b WHERE b.i = a.i) GROUP BY a.j % 20
-- step
INSERT INTO mv_base_b VALUES (2, 102)
-- step
DELETE FROM mv_base_b WHERE i = 1
-- step
UPDATE mv_base_b SET i = 4 WHERE i = 3
-- step
INSERT INTO mv_base_a VALUES (6, 60), (7, 70); INSERT INTO mv_base_b VALUES (7, 107)
-- step
DELETE FROM mv_base_b
