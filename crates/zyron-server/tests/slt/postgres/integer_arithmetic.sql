# Integer arithmetic that does not fit fails with 22003; literals that fit in 32 bits are integers.
-- error
SELECT 2147483647::int + 1
;;
-- error
SELECT 2147483647 + 1
;;
SELECT 2147483647::int8 + 1
;;
-- error
SELECT 9223372036854775807 + 1
;;
-- error
SELECT (-9223372036854775807 - 1) - 1
;;
-- error
SELECT 32767::int2 + 1::int2
;;
-- error
SELECT 100000 * 100000
;;
SELECT 100000::bigint * 100000
;;
SELECT 7 / 2, -7 / 2, 7 % 3, 2147483647 - 1, -2147483647 - 1
;;
CREATE TABLE n(i int, s smallint, b bigint)
;;
INSERT INTO n VALUES (2147483647, 32767, 9223372036854775807), (1, 1, 1)
;;
-- error
SELECT i + 1 FROM n
;;
-- error
SELECT s + s FROM n
;;
-- error
SELECT b * 2 FROM n
;;
SELECT i + 1 FROM n WHERE i = 1
;;
SELECT i::bigint + 1, s + 1, b - 1 FROM n ORDER BY i
;;
-- error
SELECT sum(i + i) FROM n
;;
SELECT sum(i) + 1, sum(b) - 9223372036854775807 FROM n WHERE i < 2
;;
-- error
INSERT INTO n VALUES (2147483647 + 1, 0, 0)
;;
