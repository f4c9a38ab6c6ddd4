# A statement that fails inside BEGIN ... COMMIT fails the whole block, whichever layer raised the error.
CREATE TABLE ledger(id int PRIMARY KEY, amount int)
;;
BEGIN
;;
INSERT INTO ledger VALUES (1, 10)
;;
# Division by zero is raised while the rows stream, after the statement was planned.
-- error
SELECT 1/0
;;
-- error
INSERT INTO ledger VALUES (2, 20)
;;
-- error
SELECT * FROM ledger
;;
COMMIT
;;
SELECT count(*) FROM ledger
;;
# An overflow raised while executing.
BEGIN
;;
INSERT INTO ledger VALUES (3, 30)
;;
-- error
SELECT amount * 100000000 FROM ledger
;;
-- error
INSERT INTO ledger VALUES (4, 40)
;;
ROLLBACK
;;
SELECT count(*) FROM ledger
;;
# A bad cast while executing, then ROLLBACK TO a savepoint set before it recovers the block.
BEGIN
;;
INSERT INTO ledger VALUES (5, 50)
;;
SAVEPOINT s
;;
-- error
SELECT 'x'::int
;;
-- error
INSERT INTO ledger VALUES (6, 60)
;;
ROLLBACK TO SAVEPOINT s
;;
INSERT INTO ledger VALUES (7, 70)
;;
COMMIT
;;
SELECT id, amount FROM ledger ORDER BY id
;;
# A planning error fails the block too.
BEGIN
;;
INSERT INTO ledger VALUES (8, 80)
;;
-- error
SELECT nope FROM ledger
;;
COMMIT
;;
SELECT id FROM ledger ORDER BY id
;;
