-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
CREATE TABLE mv_base_b (i int PRIMARY KEY, k int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
INSERT INTO mv_base_b VALUES (1, 101), (2, 102), (3, 103), (4, 104);
-- transform
TRANSFORM mv_join FROM mv_base_a a JOIN mv_base_b b ON a.i = b.i SELECT a.j AS j, b.k AS k
-- recompute
SELECT a.i, b.i, a.j, b.k FROM mv_base_a a JOIN mv_base_b b ON a.i = b.i
-- step
INSERT INTO mv_base_b VALUES (5, 105)
-- step
UPDATE mv_base_a SET j = 0 WHERE i = 1
-- step
DELETE FROM mv_base_b WHERE i = 2
-- step
UPDATE mv_base_b SET i = 6 WHERE i = 3
-- step
BEGIN; INSERT INTO mv_base_a VALUES (6, 60); DELETE FROM mv_base_a WHERE i = 4; COMMIT
