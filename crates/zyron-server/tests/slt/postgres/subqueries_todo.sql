# Subquery shapes Zyron does not run yet: non-equality correlation, correlated
# scalar subqueries without an aggregate, EXISTS and IN in a select list, a
# correlated IN with a constant on the left, ANY, and two planner errors
# (42703) on CTE and nested correlation. Each errors (none answers wrongly);
# they move into subqueries.sql as they are fixed.
# Correlated and uncorrelated subqueries of every shape, NULLs included.
CREATE TABLE t1(a int, b int, c int)
;;
INSERT INTO t1 VALUES (1,2,3),(2,3,4),(3,1,2),(NULL,5,1),(4,2,NULL)
;;
CREATE TABLE t2(x int, y int)
;;
INSERT INTO t2 VALUES (1,10),(1,11),(2,20),(NULL,30),(5,NULL)
;;
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
