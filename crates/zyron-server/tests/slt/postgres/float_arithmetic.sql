# Float arithmetic that leaves the finite numbers fails as PostgreSQL's does (Arrow answered
# inf or 0): overflow and underflow are 22003, division by zero 22012; infinite operands
# keep IEEE results.
-- error
SELECT 1e308::float8 * 10
;;
-- error
SELECT 1.0::float8 / 0
;;
-- error
SELECT 0::float8 / 0::float8
;;
-- error
SELECT 1e-320::float8 * 1e-10::float8
;;
-- error
SELECT 3e38::float4 * 10::float4
;;
SELECT 'infinity'::float8 * 2, 1::float8 / 'infinity'::float8, 'infinity'::float8 - 'infinity'::float8
;;
SELECT 1e-310::float8 * 1e-10::float8
;;
CREATE TABLE fa (id int, f float8, r real, n numeric(10, 2))
;;
INSERT INTO fa VALUES (1, 1e300, 1e30, 2.50), (2, -2.5, -2.5, -2.50), (3, 0, 0, 2.49), (4, NULL, NULL, NULL), (5, 1.5, 1.5, -0.5)
;;
-- error
SELECT f * 1e10::float8 FROM fa
;;
-- error
SELECT id, 1::float8 / f FROM fa
;;
SELECT id, f / 2::float8, r * 2::real FROM fa ORDER BY id
;;
# A numeric cast to an integer rounds ties away from zero (Arrow truncated); a double rounds
# ties to even.
SELECT id, n::int, n::bigint, n::smallint, f::int FROM fa WHERE id > 1 ORDER BY id
;;
SELECT 2.5::numeric::int, (-2.5)::numeric::int, 2.7::numeric::int, 2.4999::numeric(6, 4)::int, 2.5::float8::int, 3.5::float8::int
;;
# Floats print as PostgreSQL prints them (shortest digits; exponent below 1e-4 and from 1e15).
SELECT 1e20::float8, 1e15::float8, 1e14::float8, 1e-5::float8, 0.0001::float8, 123456789012345678::float8
;;
SELECT 'nan'::float8, '-inf'::float8, 'inf'::float8, '-0'::float8, 1000::float8
;;
SELECT 1e10::float4, 1234567::float4, 123456::float4, 0.1::float4
;;
# NaN divided by zero is NaN, not an error.
SELECT 'nan'::float8 / 0::float8, 'nan'::float4 / 0::float4
;;
# Statements that look a row up by its key check their arithmetic too.
CREATE TABLE fp (id int PRIMARY KEY, f float8, i int, n numeric(6, 2))
;;
INSERT INTO fp VALUES (1, 1e300, 2147483647, 2.5), (2, 2, 1, -2.5)
;;
-- error
UPDATE fp SET f = f * 1e10::float8 WHERE id = 1
;;
-- error
UPDATE fp SET i = i + 1 WHERE id = 1
;;
-- error
UPDATE fp SET f = f / 0::float8 WHERE id = 2
;;
UPDATE fp SET f = f * 2::float8, i = i + 1 WHERE id = 2
;;
SELECT id, f, i, n::int FROM fp WHERE id = 2
;;
SELECT id, f, i, n::int FROM fp ORDER BY id
;;
