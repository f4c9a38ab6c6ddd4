# Wrong answers the differential test (tests/differential.rs) found, reduced.
CREATE TABLE d1(a int, b bigint, f double precision)
;;
INSERT INTO d1 VALUES (1, NULL, 0.5), (1, 5, -1.5), (1, 5, 2.5), (2, 0, -2.5), (NULL, -3, NULL), (NULL, 1, 1.5)
;;
CREATE TABLE d2(a int, t text)
;;
INSERT INTO d2 VALUES (1, 'x'), (2, NULL), (2, 'y'), (NULL, 'z')
;;
# INTERSECT ALL and EXCEPT ALL count copies (DataFusion planned them as semi and anti joins).
-- rowsort
SELECT a FROM d1 INTERSECT ALL SELECT a FROM d2
;;
-- rowsort
SELECT a FROM d1 EXCEPT ALL SELECT a FROM d2
;;
-- rowsort
SELECT a, b FROM d1 INTERSECT ALL SELECT a, CAST(a AS bigint) * 5 FROM d2
;;
-- rowsort
SELECT x FROM (VALUES (1), (1), (1), (2), (NULL), (NULL)) v(x) EXCEPT ALL SELECT x FROM (VALUES (1), (NULL)) w(x)
;;
# NOT IN with a constant probe and a NULL among the values is never true.
SELECT count(*) FROM d1 WHERE -2 NOT IN (SELECT b FROM d1)
;;
SELECT count(*) FROM d1 WHERE 7 NOT IN (SELECT a FROM d2 WHERE d2.a = d1.a)
;;
SELECT a, 'z' NOT IN (SELECT t FROM d2 WHERE d2.a = d1.a) FROM d1 ORDER BY a NULLS LAST, b NULLS LAST
;;
# IN below the top of a predicate keeps its NULL (DataFusion's mark join answered false).
SELECT count(*) FROM d1 WHERE (NULL IN (SELECT a FROM d2 WHERE d2.a = d1.a)) IS NULL
;;
SELECT count(*) FROM d1 WHERE a IN (SELECT a FROM d2 WHERE t IS NULL) OR f > 2
;;
# A scalar subquery without rows is NULL even when its value never is.
SELECT count(*) FROM d1 WHERE (SELECT 'ab' FROM d2 WHERE false) IS NULL
;;
SELECT count(*) FROM d1 WHERE (SELECT 'ab' FROM d2 WHERE d2.a = d1.a AND false ORDER BY 1 LIMIT 1) IS NULL
;;
SELECT a, COALESCE((SELECT 'one' FROM d2 WHERE d2.a = d1.a AND d2.t = 'x'), 'none') FROM d1 ORDER BY a NULLS LAST, b NULLS LAST
;;
# A float cast to an integer rounds (ties to even); a numeric literal rounds ties away from zero.
SELECT f, CAST(f AS integer), CAST(f AS bigint) FROM d1 ORDER BY 1 NULLS LAST
;;
SELECT CAST(2.5 AS integer), CAST(-2.5 AS integer), CAST(0.5 AS integer), CAST(CAST(0.5 AS double precision) AS integer)
;;
# A sliding BIGINT sum over a frame without values is NULL.
SELECT i, sum(x) OVER (ORDER BY i ROWS BETWEEN CURRENT ROW AND CURRENT ROW) FROM (VALUES (1, CAST(5 AS bigint)), (2, CAST(NULL AS bigint)), (3, CAST(9223372036854775807 AS bigint)), (4, CAST(-1 AS bigint))) v(i, x) ORDER BY i
;;
SELECT sum(x) FROM (VALUES (CAST(9223372036854775807 AS bigint)), (CAST(1 AS bigint)), (CAST(-1 AS bigint))) v(x)
;;
# A correlated scalar subquery without an aggregate looks only at the rows its outer row reads.
CREATE TABLE customers(id int, name text)
;;
INSERT INTO customers VALUES (1, 'Ann'), (2, 'Bob')
;;
CREATE TABLE phones(cid int, phone text)
;;
INSERT INTO phones VALUES (1, 'a'), (2, 'b'), (2, 'c')
;;
SELECT name, (SELECT phone FROM phones p WHERE p.cid = c.id) FROM customers c WHERE name = 'Ann'
;;
-- error
SELECT name, (SELECT phone FROM phones p WHERE p.cid = c.id) FROM customers c
;;
