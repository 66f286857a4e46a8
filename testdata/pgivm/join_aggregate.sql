-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
CREATE TABLE mv_base_b (i int PRIMARY KEY, k int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
INSERT INTO mv_base_b VALUES (1, 101), (2, 102), (3, 103), (4, 104);
-- transform
TRANSFORM mv_join_agg FROM mv_base_a a JOIN mv_base_b b ON a.i = b.i SELECT a.i % 2 AS m, count(*) AS n, sum(a.j) AS sj, sum(b.k) AS sk GROUP BY a.i % 2
-- recompute
SELECT a.i % 2, count(*), sum(a.j), sum(b.k) FROM mv_base_a a JOIN mv_base_b b ON a.i = b.i GROUP BY a.i % 2
-- step
INSERT INTO mv_base_b VALUES (5, 105)
-- step
DELETE FROM mv_base_a WHERE i = 1
-- step
UPDATE mv_base_b SET k = k * 10 WHERE i % 2 = 0
-- step
BEGIN; DELETE FROM mv_base_b WHERE i = 3; UPDATE mv_base_a SET i = 30 WHERE i = 3; COMMIT
