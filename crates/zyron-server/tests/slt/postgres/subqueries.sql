# Correlated and uncorrelated subqueries of every shape, NULLs included.
CREATE TABLE t1(a int, b int, c int)
;;
INSERT INTO t1 VALUES (1,2,3),(2,3,4),(3,1,2),(NULL,5,1),(4,2,NULL)
;;
CREATE TABLE t2(x int, y int)
;;
INSERT INTO t2 VALUES (1,10),(1,11),(2,20),(NULL,30),(5,NULL)
;;
# Scalar subquery in the select list, equality correlation, count (the count bug: 0 not NULL).
SELECT a, b, (SELECT count(*) FROM t1 AS x WHERE x.b = t1.b) FROM t1 ORDER BY a NULLS LAST
;;
SELECT b, (SELECT count(*) FROM t2 WHERE t2.x = t1.a) FROM t1 ORDER BY b, a
;;
SELECT a, (SELECT max(y) FROM t2 WHERE t2.x = t1.a) FROM t1 ORDER BY a NULLS FIRST
;;
# Scalar subquery in WHERE and HAVING.
SELECT a FROM t1 WHERE c > (SELECT count(*) FROM t2 WHERE t2.x = t1.a) ORDER BY a
;;
SELECT b, count(*) FROM t1 GROUP BY b HAVING count(*) > (SELECT count(*) FROM t2 WHERE t2.x = t1.b) ORDER BY b
;;
# EXISTS and NOT EXISTS, correlated, also in the select list.
SELECT a FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.x = t1.a) ORDER BY a
;;
SELECT a FROM t1 WHERE NOT EXISTS (SELECT 1 FROM t2 WHERE t2.x = t1.a) ORDER BY a NULLS LAST
;;
SELECT a FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.x > t1.a) ORDER BY a
;;
# IN and NOT IN with NULLs on either side.
SELECT a FROM t1 WHERE a IN (SELECT x FROM t2) ORDER BY a
;;
SELECT a FROM t1 WHERE a NOT IN (SELECT x FROM t2) ORDER BY a
;;
SELECT a FROM t1 WHERE a NOT IN (SELECT x FROM t2 WHERE x IS NOT NULL) ORDER BY a
;;
SELECT a FROM t1 WHERE a IN (SELECT x FROM t2 WHERE t2.y > t1.c * 5) ORDER BY a
;;
# Nested correlation.
SELECT a FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.x = t1.a AND t2.y > (SELECT min(y) FROM t2 AS z WHERE z.x = t2.x)) ORDER BY a
;;
# Uncorrelated scalar subqueries.
SELECT a FROM t1 WHERE b = (SELECT max(b) FROM t1) ORDER BY a
;;
SELECT (SELECT max(y) FROM t2), (SELECT count(*) FROM t2 WHERE y IS NULL)
;;
-- error
SELECT (SELECT x FROM t2)
;;
# ANY and ALL.
SELECT a FROM t1 WHERE a > ALL (SELECT x FROM t2 WHERE x IS NOT NULL) ORDER BY a
;;
# Shapes DataFusion does not run or plans wrong, run by Zyron's Apply
# (subquery/): non-equality correlation, correlated scalar subqueries without
# an aggregate, EXISTS and IN in a select list, a constant on the left of IN,
# ANY, nested correlation and correlation over a CTE.
# Non-equality correlation.
SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) FROM t1 ORDER BY b, a
;;
SELECT a, (SELECT sum(y) FROM t2 WHERE t2.x <= t1.a) FROM t1 ORDER BY a NULLS LAST
;;
SELECT a, (SELECT min(y) FROM t2 WHERE t2.x <> t1.a AND t2.y > t1.c) FROM t1 ORDER BY a NULLS LAST
;;
# Correlated scalar subquery without an aggregate (one row or none per outer row).
SELECT a, (SELECT t2.y FROM t2 WHERE t2.x = t1.a AND t2.y < 11) FROM t1 ORDER BY a NULLS LAST
;;
-- error
SELECT a, (SELECT t2.y FROM t2 WHERE t2.x = t1.a) FROM t1 ORDER BY a
;;
SELECT a FROM t1 WHERE (SELECT max(y) FROM t2 WHERE t2.x < t1.a) > 15 ORDER BY a
;;
# Over a CTE of VALUES, not a table.
WITH v(k, n) AS (VALUES (1, 10), (2, 20), (2, 21), (3, NULL))
SELECT k, (SELECT count(*) FROM v AS w WHERE w.k = v.k), (SELECT max(n) FROM v AS w WHERE w.k < v.k) FROM v ORDER BY k, n
;;
SELECT a, EXISTS (SELECT 1 FROM t2 WHERE t2.x = t1.a) FROM t1 ORDER BY a NULLS LAST
;;
SELECT a, a IN (SELECT x FROM t2), a NOT IN (SELECT x FROM t2 WHERE x IS NOT NULL) FROM t1 ORDER BY a NULLS LAST
;;
# A constant on the left of IN.
SELECT 1 IN (SELECT x FROM t2), 3 IN (SELECT x FROM t2), 3 IN (SELECT x FROM t2 WHERE x IS NOT NULL), NULL NOT IN (SELECT x FROM t2)
;;
SELECT a FROM t1 WHERE 2 IN (SELECT x FROM t2 WHERE t2.x = t1.a) ORDER BY a
;;
SELECT a, (SELECT count(*) FROM t2 WHERE t2.x IN (SELECT b FROM t1 AS i WHERE i.a = t1.a)) FROM t1 ORDER BY a NULLS LAST
;;
SELECT a FROM t1 WHERE a = ANY (SELECT x FROM t2) ORDER BY a
;;
SELECT a, a < ANY (SELECT x FROM t2), a >= ALL (SELECT x FROM t2 WHERE x IS NOT NULL) FROM t1 ORDER BY a NULLS LAST
;;
