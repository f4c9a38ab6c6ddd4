# IN lists tested against the same expression are combined by set algebra
# only where that holds. DataFusion's simplifier combined lists holding a
# column (`x IN (y) AND x NOT IN (x, 'a')` became `x = y`) or a NULL, found
# by the differential test's TLP oracle (fresh seed 1796691905752015199).
CREATE TABLE il (c text)
;;
INSERT INTO il VALUES ('a'), ('b'), ('AA'), (NULL)
;;
SELECT count(*) FROM il l JOIN il r ON l.c = r.c WHERE NOT (l.c IN (l.c, 'AA') OR l.c NOT IN (r.c))
;;
SELECT count(*) FROM il l JOIN il r ON l.c = r.c WHERE l.c NOT IN (l.c, 'AA') AND l.c IN (r.c)
;;
-- rowsort
SELECT l.c, r.c, l.c IN (r.c, 'x') AND l.c NOT IN (r.c) FROM il l, il r
;;
SELECT count(*) FROM il WHERE c IN ('a', 'b') AND c NOT IN ('b', NULL)
