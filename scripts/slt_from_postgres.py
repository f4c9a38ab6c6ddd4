#!/usr/bin/env python3
"""Writes a sqllogictest file whose expected answers are PostgreSQL's.

Input: SQL statements separated by lines holding only `;;`. A statement may
start with `-- rowsort` (its rows are compared unordered) or `-- error` (it
must fail: PostgreSQL's SQLSTATE is recorded). Lines starting with `#` before
a statement are copied as comments. Statements run in order in one
autocommit session of the server the usual PG* variables name, so a test can
use BEGIN and ROLLBACK. Needs psycopg2 (`pip install psycopg2-binary`).

    PGHOST=/tmp/pg PGPORT=5499 PGUSER=postgres scripts/slt_from_postgres.py in.sql > out.slt

With `--record-all`, every answer is recorded as it comes, errors included:
run it against Zyron and PostgreSQL and diff the two files to compare them.
"""
import sys

import psycopg2


def blocks(text):
    comment, block = [], []
    for line in text.splitlines():
        if line.strip() == ";;":
            yield comment, block
            comment, block = [], []
        elif line.startswith("#") and not any(l.strip() for l in block):
            comment.append(line)
        else:
            block.append(line)
    if any(l.strip() for l in block):
        yield comment, block


def render(value):
    """As the Zyron slt runner renders a value in the text protocol."""
    if value is None:
        return "NULL"
    if value == "":
        return "(empty)"
    return value


def main():
    connection = psycopg2.connect("")
    connection.autocommit = True
    as_sent = lambda value, _cursor: value
    for oid in list(psycopg2.extensions.string_types):
        psycopg2.extensions.register_type(
            psycopg2.extensions.new_type((oid,), f"TEXT{oid}", as_sent), connection
        )
    cursor = connection.cursor()
    out = [f"# Expected answers are PostgreSQL 15's: scripts/slt_from_postgres.py made this file.", ""]
    for comment, block in blocks(open(sys.argv[-1]).read()):
        flags = {l[3:].strip() for l in block if l.startswith("-- ")}
        sql = "\n".join(l for l in block if not l.startswith("-- ")).strip()
        out += comment
        try:
            cursor.execute(sql)
        except psycopg2.Error as error:
            if "error" not in flags and not RECORD_ALL:
                raise SystemExit(f"PostgreSQL failed ({error.pgcode}) on:\n{sql}\n{error}")
            out += [f"statement error {error.pgcode}", sql, ""]
            continue
        if "error" in flags and not RECORD_ALL:
            raise SystemExit(f"PostgreSQL accepted:\n{sql}")
        if cursor.description is None:
            out += ["statement ok", sql, ""]
            continue
        header = "query " + "T" * len(cursor.description)
        if "rowsort" in flags:
            header += " rowsort"
        rows = [[render(v) for v in row] for row in cursor.fetchall()]
        if "rowsort" in flags:
            rows.sort()  # the runner sorts the rows it gets, and compares them with these
        out += [header, sql, "----"] + [" ".join(row) for row in rows] + [""]
    print("\n".join(out).rstrip() + "\n", end="")


RECORD_ALL = "--record-all" in sys.argv

if __name__ == "__main__":
    main()
