-- setup
CREATE TABLE base_r (id int PRIMARY KEY, i int);
CREATE TABLE base_s (id int PRIMARY KEY, i int, j int);
CREATE TABLE base_t (id int PRIMARY KEY, j int);
INSERT INTO base_r VALUES (1, 1), (2, 1), (3, 2), (4, 3);
INSERT INTO base_s VALUES (1, 1, 1), (2, 2, 2), (3, 2, 3), (4, 4, 4);
INSERT INTO base_t VALUES (1, 1), (2, 2), (3, 2), (4, 5);
-- transform
TRANSFORM mv_r_s_t FROM base_r r LEFT JOIN base_s s ON r.i = s.i LEFT JOIN base_t t ON s.j = t.j SELECT r.i AS ri, s.i AS si, t.j AS tj
-- recompute
SELECT r.id, s.id, t.id, r.i, s.i, t.j FROM base_r r LEFT JOIN base_s s ON r.i = s.i LEFT JOIN base_t t ON s.j = t.j
-- step
INSERT INTO base_r VALUES (5, 4), (6, 5)
-- step
INSERT INTO base_s VALUES (5, 3, 5)
-- step
INSERT INTO base_t VALUES (5, 4), (6, 3)
-- step
DELETE FROM base_s WHERE id = 2
-- step
UPDATE base_s SET j = 2 WHERE id = 3
-- step
DELETE FROM base_t WHERE j = 2
-- step
UPDATE base_r SET i = 2 WHERE id = 1
-- step
DELETE FROM base_r WHERE i = 1
-- step
DELETE FROM base_s
-- step
INSERT INTO base_s VALUES (10, 2, 1), (11, 3, 5), (12, 4, 4)
