-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
CREATE TABLE mv_base_b (id int PRIMARY KEY, i int, k int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
INSERT INTO mv_base_b VALUES (1, 1, 101), (2, 2, 102), (3, 2, 103), (4, 4, 104);
-- transform
TRANSFORM mv_exists FROM mv_base_a a SELECT a.j WHERE EXISTS (SELECT 1 FROM mv_base_b b WHERE a.i = b.i AND b.k < 104) AND a.j < 50
-- recompute
SELECT a.i, a.j FROM mv_base_a a WHERE EXISTS (SELECT 1 FROM mv_base_b b WHERE a.i = b.i AND b.k < 104) AND a.j < 50
-- step
INSERT INTO mv_base_b VALUES (5, 3, 105), (6, 3, 99)
-- step
DELETE FROM mv_base_b WHERE id = 2
-- step
DELETE FROM mv_base_b WHERE id = 3
-- step
UPDATE mv_base_b SET k = 1 WHERE id = 4
-- step
UPDATE mv_base_b SET i = 5 WHERE id = 1
-- step
UPDATE mv_base_a SET j = 5 WHERE i = 5
-- step
DELETE FROM mv_base_b
