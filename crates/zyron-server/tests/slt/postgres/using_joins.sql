# Joins USING and NATURAL: one merged column per name (the right side's value in a right join,
# COALESCE in a full join), listed first by SELECT *. DataFusion answered NULL where a full
# or right join's row came from the right, and kept the tables' column order.
CREATE TABLE uj1 (t text, i int, j int)
;;
CREATE TABLE uj2 (k int, i int)
;;
CREATE TABLE uj3 (i int, t text, z int)
;;
INSERT INTO uj1 VALUES ('one', 1, 4), ('two', 2, 3), ('three', 3, 2), ('zero', NULL, 0)
;;
INSERT INTO uj2 VALUES (-1, 1), (2, 2), (-5, 5), (0, NULL)
;;
INSERT INTO uj3 VALUES (1, 'one', 10), (5, 'five', 50), (7, 'seven', 70)
;;
-- rowsort
SELECT * FROM uj1 FULL JOIN uj2 USING (i)
;;
-- rowsort
SELECT * FROM uj1 RIGHT JOIN uj2 USING (i)
;;
-- rowsort
SELECT * FROM uj1 LEFT JOIN uj2 USING (i)
;;
-- rowsort
SELECT * FROM uj1 JOIN uj2 USING (i)
;;
-- rowsort
SELECT i, uj1.i, uj2.i FROM uj1 FULL JOIN uj2 USING (i)
;;
SELECT i, k FROM uj1 FULL JOIN uj2 USING (i) WHERE i > 1 ORDER BY i
;;
SELECT i, count(*) FROM uj1 FULL JOIN uj2 USING (i) GROUP BY i ORDER BY i
;;
SELECT i + 1 AS next, k FROM uj1 RIGHT JOIN uj2 USING (i) ORDER BY i NULLS FIRST, k
;;
-- rowsort
SELECT *, i FROM uj1 FULL JOIN uj2 USING (i)
;;
-- rowsort
SELECT * FROM uj1 NATURAL FULL JOIN uj3
;;
-- rowsort
SELECT * FROM uj1 FULL JOIN uj3 USING (i, t)
;;
-- rowsort
SELECT a.*, b.k FROM uj1 a FULL JOIN uj2 b USING (i)
;;
-- rowsort
SELECT * FROM uj1 a FULL JOIN uj2 b USING (i) FULL JOIN uj3 c USING (i)
;;
-- rowsort
SELECT * FROM (SELECT i, j AS x FROM uj1) s FULL JOIN (SELECT i, k FROM uj2) r USING (i)
;;
-- rowsort
SELECT * FROM (uj1 FULL JOIN uj2 USING (i)) FULL JOIN uj3 ON uj3.i = uj2.i
;;
-- rowsort
SELECT ss.i FROM (SELECT * FROM uj1 FULL JOIN uj2 USING (i)) ss
;;
-- rowsort
SELECT * FROM uj2 FULL JOIN uj1 USING (i) WHERE EXISTS (SELECT 1 FROM uj3 WHERE uj3.i = i)
;;
# A name the select list gives is what ORDER BY reads.
SELECT k AS i FROM uj1 FULL JOIN uj2 USING (i) ORDER BY i NULLS FIRST
;;
# Qualified references read one side.
-- rowsort
SELECT uj2.i, uj1.t FROM uj1 FULL JOIN uj2 USING (i)
;;
# *, name beside a plain join: PostgreSQL lets the names repeat.
SELECT *, t FROM uj3 ORDER BY i
;;
# A join on a column a right join merged compares the right side's value.
CREATE TABLE uk_a (k int)
;;
CREATE TABLE uk_b (k int, b text)
;;
CREATE TABLE uk_c (k int, c text)
;;
INSERT INTO uk_a VALUES (1)
;;
INSERT INTO uk_b VALUES (1, 'b1'), (2, 'b2')
;;
INSERT INTO uk_c VALUES (2, 'c2')
;;
SELECT * FROM uk_a RIGHT JOIN uk_b USING (k) JOIN uk_c USING (k)
;;
SELECT * FROM uk_a NATURAL RIGHT JOIN uk_b NATURAL JOIN uk_c
;;
SELECT * FROM uk_c JOIN (uk_a RIGHT JOIN uk_b USING (k)) USING (k)
;;
# A later join's ON condition reads the merged column.
-- rowsort
SELECT * FROM uk_a FULL JOIN uk_b USING (k) JOIN (VALUES (2), (3)) v(m) ON m = k
;;
# Subquery columns named after a cast, and repeated names.
-- rowsort
SELECT * FROM uj2 JOIN (SELECT i, j::bigint FROM uj1) s USING (i)
;;
-- rowsort
SELECT * FROM uj2 JOIN (SELECT i, 1 AS y, 2 AS y FROM uj1) s USING (i)
;;
# ORDER BY a bare name reads the output column of that name.
SELECT DISTINCT i FROM uj1 FULL JOIN uj2 USING (i) ORDER BY i
;;
SELECT uj2.i FROM uj1 FULL JOIN uj2 USING (i) ORDER BY i
;;
-- rowsort
SELECT *, 1 AS i FROM uj1 JOIN uj2 USING (i)
;;
# Each branch of a set operation.
-- rowsort
SELECT * FROM uj1 FULL JOIN uj2 USING (i) UNION ALL SELECT * FROM uj1 FULL JOIN uj2 USING (i)
;;
-- rowsort
(SELECT * FROM uj1 JOIN uj2 USING (i)) UNION ALL SELECT * FROM uj1 JOIN uj2 USING (i)
;;
# count(t.*) counts the rows where t has a row: not those a left join padded.
SELECT a.k, count(b.*), count(*) FROM uk_b a LEFT JOIN uk_c b ON a.k = b.k GROUP BY a.k ORDER BY a.k
;;
SELECT count(c.*) FILTER (WHERE a.k > 1) FROM uk_b a LEFT JOIN uk_c c USING (k)
;;
-- rowsort
SELECT uj1.t, count(x.*) FROM uj1 LEFT JOIN (SELECT i, k AS kk FROM uj2) x ON x.i = uj1.i GROUP BY uj1.t
;;
# Where no outer join pads t, t.* is never NULL, even for a row of NULLs.
CREATE TABLE all_null (a int, b text)
;;
INSERT INTO all_null VALUES (NULL, NULL), (1, 'x')
;;
SELECT count(all_null.*), count(n.*) FROM all_null JOIN all_null n ON true
;;
SELECT count(x.*) FROM uk_a RIGHT JOIN uk_b x USING (k)
;;
