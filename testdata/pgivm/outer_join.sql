-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
CREATE TABLE mv_base_b (i int PRIMARY KEY, k int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
INSERT INTO mv_base_b VALUES (1, 101), (3, 103);
-- transform
TRANSFORM mv_outer FROM mv_base_a a LEFT JOIN mv_base_b b ON a.i = b.i SELECT a.j AS j, b.k AS k
-- recompute
SELECT a.i, b.i, a.j, b.k FROM mv_base_a a LEFT JOIN mv_base_b b ON a.i = b.i
-- step
INSERT INTO mv_base_b VALUES (2, 102)
-- step
DELETE FROM mv_base_b WHERE i = 1
-- step
UPDATE mv_base_b SET i = 4 WHERE i = 3
-- step
DELETE FROM mv_base_a WHERE i = 4
-- step
INSERT INTO mv_base_b VALUES (9, 109)
-- step
DELETE FROM mv_base_b
