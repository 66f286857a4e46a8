-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int NOT NULL);
INSERT INTO mv_base_a SELECT g, g % 4 FROM generate_series(1, 20) g;
-- transform
TRANSFORM mv_counts FROM mv_base_a SELECT j AS j, count(*) AS n GROUP BY j
-- transform
TRANSFORM mv_big FROM mv_counts SELECT n AS n WHERE n > 4
-- recompute
SELECT j, n FROM mv_counts WHERE n > 4
-- step
INSERT INTO mv_base_a VALUES (21, 1), (22, 1)
-- step
DELETE FROM mv_base_a WHERE j = 2 AND i > 10
-- step
UPDATE mv_base_a SET j = 3 WHERE j = 0
