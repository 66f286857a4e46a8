-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
-- transform
TRANSFORM mv_where FROM mv_base_a SELECT j * 2 AS j2 WHERE j > 15 AND i <> 4
-- recompute
SELECT i, j * 2 FROM mv_base_a WHERE j > 15 AND i <> 4
-- step
UPDATE mv_base_a SET j = 5 WHERE i = 3
-- step
UPDATE mv_base_a SET j = 100 WHERE i = 1
-- step
UPDATE mv_base_a SET i = 40 WHERE i = 4
-- step
TRUNCATE mv_base_a
-- step
INSERT INTO mv_base_a VALUES (7, 70), (8, 8)
