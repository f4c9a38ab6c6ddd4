# AND and OR evaluate their right side only where the left side leaves the row
# undecided, as PostgreSQL does: a guard on the left keeps a division by zero,
# an overflow or a failing cast on the right from running. DataFusion evaluated
# the right side on the whole batch once more than a fifth of the rows passed.
CREATE TABLE sc (a int, b int, t text, x float8)
;;
INSERT INTO sc SELECT g, CASE WHEN g % 10 = 0 THEN NULL ELSE g % 3 END, CASE WHEN g % 4 = 0 THEN 'x' || g ELSE g::text END, (g % 5)::float8 FROM generate_series(1, 1000) g
;;
SELECT count(*) FROM sc WHERE b <> 0 AND a / b > 2
;;
# PostgreSQL runs a filter's cheaper conditions first, whatever their order.
SELECT count(*) FROM sc WHERE a / b > 2 AND b <> 0
;;
# but evaluates OR (and AND inside it) from left to right.
-- error
SELECT count(*) FROM sc WHERE a / b > 600 OR b = 0
;;
-- error
SELECT count(*) FROM sc WHERE (a / b > 600 AND b <> 0) OR a = 1
;;
SELECT count(*) FROM sc WHERE b = 0 OR a / b > 600
;;
SELECT count(*) FROM sc WHERE b IS NOT NULL AND b <> 0 AND a % b = 1
;;
SELECT count(*) FROM sc WHERE (b = 0 OR a / b > 2) AND a > 5
;;
SELECT count(*) FROM sc WHERE NOT (b = 0 OR a / b <= 600)
;;
SELECT count(*) FROM sc WHERE CASE WHEN b = 0 THEN false ELSE a / b > 2 END
;;
SELECT count(*) FROM (SELECT a, b FROM sc WHERE b <> 0) s WHERE a / b > 2
;;
SELECT count(*) FROM sc WHERE x <> 0 AND 1 / x > 0.3
;;
SELECT count(*) FROM sc WHERE t NOT LIKE 'x%' AND t::int > 500
;;
SELECT count(*) FROM sc WHERE a < 700 AND a * 3000000 > 0
;;
SELECT count(*) FILTER (WHERE b <> 0 AND a / b > 400) FROM sc
;;
SELECT sum(a / b) FILTER (WHERE b <> 0) FROM sc
;;
SELECT count(*) FILTER (WHERE b <> 0 AND a / b > 400), sum(a / b) FILTER (WHERE b <> 0) FROM sc
;;
# Grouped aggregation computes arguments before FILTER unless guarded.
SELECT a % 2 AS odd, sum(a / b) FILTER (WHERE b <> 0), count(*) FILTER (WHERE b <> 0 AND a / b > 400) FROM sc GROUP BY a % 2 ORDER BY 1
;;
SELECT b, count(*) FROM sc GROUP BY b HAVING count(b) > 0 AND sum(a) / count(b) > 400 ORDER BY b
;;
SELECT b, count(*) FROM sc GROUP BY b HAVING b <> 0 AND sum(a) / b > 100000 ORDER BY b
;;
SELECT a, b, b <> 0 AND a / b > 2 AS guarded, b = 0 OR a / b > 2 AS either FROM sc WHERE a <= 12 ORDER BY a
;;
SELECT count(*) FROM sc s1 JOIN sc s2 ON s1.a = s2.a WHERE s2.b <> 0 AND s1.a / s2.b > 2
;;
# Rows the guard lets through still fail.
-- error
SELECT count(*) FROM sc WHERE b >= 0 AND a / b > 2
;;
-- error
SELECT count(*) FROM sc WHERE a < 800 AND a * 3000000 > 0
;;
-- error
SELECT count(*) FROM sc WHERE b <> 1 AND t::int > 5
;;
# UPDATE and DELETE test their conditions as a query does.
UPDATE sc SET x = a / b WHERE b <> 0 AND a / b > 450
;;
DELETE FROM sc WHERE b <> 0 AND a / b > 480
;;
DELETE FROM sc WHERE a / b < 0 AND b <> 0
;;
SELECT count(*), sum(x) FROM sc
;;
# Join conditions are a qual list too.
SELECT count(*) FROM sc s1 JOIN sc s2 ON s1.a = s2.a + 1 AND s1.b <> s2.b AND s1.a / (s1.b - s2.b) > 0
;;
SELECT count(*) FROM sc s1 LEFT JOIN sc s2 ON s1.a = s2.a + 1 AND s1.b <> s2.b AND s1.a / (s1.b - s2.b) > 0
;;
SELECT count(*) FROM sc s1 JOIN sc s2 ON s1.a < s2.a AND s1.a > 900 AND s1.b <> s2.b AND s2.a / (s1.b - s2.b) < 0
