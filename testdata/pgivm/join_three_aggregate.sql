-- setup
CREATE TABLE mv_base_a (i int PRIMARY KEY, j int);
CREATE TABLE mv_base_b (i int PRIMARY KEY, k int);
CREATE TABLE mv_base_c (k int PRIMARY KEY, name text);
INSERT INTO mv_base_a VALUES (1, 10), (2, 20), (3, 30), (4, 40), (5, 50);
INSERT INTO mv_base_b VALUES (1, 101), (2, 102), (3, 103), (4, 104);
INSERT INTO mv_base_c VALUES (101, 'x'), (102, 'y'), (103, 'x');
-- transform
TRANSFORM mv_abc FROM mv_base_a a JOIN mv_base_b b ON a.i = b.i JOIN mv_base_c c ON c.k = b.k SELECT c.name, count(*) AS n, sum(a.j) AS total, avg(a.j) AS mean GROUP BY c.name
-- recompute
SELECT c.name, count(*), sum(a.j), avg(a.j) FROM mv_base_a a JOIN mv_base_b b ON a.i = b.i JOIN mv_base_c c ON c.k = b.k GROUP BY c.name
-- step
INSERT INTO mv_base_c VALUES (104, 'z')
-- step
UPDATE mv_base_c SET name = 'y' WHERE k = 101
-- step
UPDATE mv_base_b SET k = 104 WHERE i = 2
-- step
DELETE FROM mv_base_a WHERE i = 3
-- step
INSERT INTO mv_base_a VALUES (6, 60), (7, 70); INSERT INTO mv_base_b VALUES (6, 101), (7, 105)
-- step
INSERT INTO mv_base_c VALUES (105, 'x')
-- step
DELETE FROM mv_base_c WHERE name = 'y'
-- step
UPDATE mv_base_a SET j = j + 1
