#!/usr/bin/env bash
# A battery of real sqlite3 shell commands, for comparing an original sqlite3
# with a rewritten one:
#
#   tests/real/sqlite-battery.sh SQLITE3_BIN [SCRATCH_DIR]
#
# Everything it prints (stdout; each command's stderr is folded in, and each
# command's exit code is printed as "rc=N") is deterministic: no clock, no
# random(), no temporary file names.  Run it twice, or with two binaries, and
# diff the outputs.  To test a (rewritten) libsqlite3.so.0 under Debian's thin
# /usr/bin/sqlite3, set LD_LIBRARY_PATH to a directory holding it.
#
# Sections: schema+bulk insert (recursive CTE, 20k rows), indexes, joins,
# aggregates, subqueries, views, triggers, upsert, window functions, CTEs,
# JSON, FTS3/FTS4/FTS5, R*Tree, math/string/date functions with fixed inputs,
# blobs, collation, transactions/savepoints, ATTACH, .import of CSV, output
# modes (csv, json, box, markdown, html, insert, line, table, quote), .dump and
# reload, .backup/.restore, VACUUM (INTO), WAL mode, ANALYZE, EXPLAIN QUERY
# PLAN, dbstat, integrity_check, expected errors, .sha3sum, .recover-free
# shell commands (.schema, .tables, .indexes, .fullschema).
set -u
SQLITE3=${1:?usage: sqlite-battery.sh SQLITE3_BIN [SCRATCH_DIR]}
case $SQLITE3 in /*) ;; *) SQLITE3=$PWD/$SQLITE3 ;; esac
if [[ -n ${2:-} ]]; then
    D=$2; mkdir -p "$D"; rm -rf "${D:?}"/*
else
    D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
fi
cd "$D" || exit 1
export LC_ALL=C TZ=UTC
# keep ~/.sqliterc out of it
export HOME=$D

# every sqlite3 run is bounded: a hang shows up as rc=124 (or 137)
T="timeout -k 5 ${BATTERY_TIMEOUT:-120}"
sq() {  # sq TITLE DB [ARGS...] <<SQL
    local title=$1; shift
    echo "=== $title"
    $T "$SQLITE3" -batch -bail "$@" 2>&1
    echo "rc=$?"
}
sqnb() {  # like sq but without -bail (errors are part of the test)
    local title=$1; shift
    echo "=== $title"
    $T "$SQLITE3" -batch "$@" 2>&1
    echo "rc=$?"
}

battery() {
sq "version" :memory: "select sqlite_version(), sqlite_source_id() like '2022-12-28%';"

sq "create + bulk insert" main.db <<'SQL'
PRAGMA page_size=4096;
PRAGMA journal_mode=DELETE;
CREATE TABLE dept(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, budget REAL);
CREATE TABLE emp(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  dept_id INTEGER REFERENCES dept(id),
  salary INTEGER CHECK (salary > 0),
  hired TEXT,
  manager_id INTEGER,
  note BLOB
);
INSERT INTO dept(name,budget) VALUES ('eng',1e6),('ops',2.5e5),('sales',4.2e5),('hr',1.1e5),('legal',NULL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20000)
INSERT INTO emp(name,dept_id,salary,hired,manager_id,note)
SELECT printf('emp%05d', i),
       (i * 7919) % 5 + 1,
       30000 + (i * 104729) % 90000,
       date('2000-01-01', printf('+%d days', (i * 31) % 8000)),
       CASE WHEN i > 10 THEN (i * 13) % 10 + 1 END,
       CASE WHEN i % 97 = 0 THEN CAST(zeroblob(i % 300) || x'deadbeef' AS BLOB) END
FROM n;
SELECT count(*), sum(salary), min(hired), max(hired), total(length(note)) FROM emp;
SQL

sq "indexes + analyze" main.db <<'SQL'
CREATE INDEX emp_dept ON emp(dept_id, salary DESC);
CREATE INDEX emp_hired ON emp(hired);
CREATE UNIQUE INDEX emp_name ON emp(name);
CREATE INDEX emp_expr ON emp(substr(name, 4, 2), salary % 1000);
ANALYZE;
SELECT tbl, idx, stat FROM sqlite_stat1 ORDER BY tbl, idx;
PRAGMA index_list(emp);
PRAGMA index_info(emp_dept);
SQL

sq "joins + aggregates" main.db <<'SQL'
.headers on
.mode list
SELECT d.name, count(e.id) AS n, avg(e.salary) AS avg_sal, max(e.salary) AS top
FROM dept d LEFT JOIN emp e ON e.dept_id = d.id
GROUP BY d.id ORDER BY d.name;
SELECT d.name, e.name FROM dept d JOIN emp e ON e.dept_id = d.id
WHERE e.salary = (SELECT max(salary) FROM emp WHERE dept_id = d.id) ORDER BY 1, 2 LIMIT 20;
SELECT m.name AS manager, count(*) FROM emp e JOIN emp m ON e.manager_id = m.id
GROUP BY m.id HAVING count(*) > 1000 ORDER BY 2 DESC, 1;
SELECT count(*) FROM emp a CROSS JOIN dept b WHERE a.id < 50;
SELECT d.name, x.c FROM dept d, (SELECT dept_id, count(*) c FROM emp GROUP BY dept_id) x
WHERE x.dept_id = d.id ORDER BY x.c DESC;
SELECT name FROM emp WHERE id IN (SELECT manager_id FROM emp) ORDER BY 1;
SELECT count(*) FROM emp WHERE NOT EXISTS (SELECT 1 FROM dept WHERE dept.id = emp.dept_id AND budget IS NULL);
SELECT strftime('%Y', hired) y, count(*), sum(salary) FROM emp GROUP BY y ORDER BY y LIMIT 5;
SELECT group_concat(name, ',') FROM (SELECT name FROM dept ORDER BY name DESC);
SELECT dept_id, salary/10000 AS band, count(*) FROM emp GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 12;
SELECT name FROM dept UNION SELECT 'x' UNION ALL SELECT 'eng' ORDER BY 1;
SELECT name FROM dept INTERSECT SELECT name FROM dept WHERE budget > 2e5 EXCEPT SELECT 'eng' ORDER BY 1;
SELECT e.name FROM emp e RIGHT JOIN dept d ON d.id = e.dept_id AND e.id < 3 ORDER BY 1;
SELECT d.name, e.name FROM dept d FULL OUTER JOIN (SELECT * FROM emp WHERE id < 4) e ON e.dept_id = d.id ORDER BY 1, 2;
SQL

sq "views + triggers + upsert" main.db <<'SQL'
CREATE VIEW rich AS SELECT name, salary FROM emp WHERE salary > 118000;
SELECT count(*), min(name), max(name) FROM rich;
CREATE TABLE audit(id INTEGER PRIMARY KEY, emp_id INT, old_sal INT, new_sal INT, what TEXT);
CREATE TRIGGER emp_raise AFTER UPDATE OF salary ON emp
  WHEN new.salary <> old.salary
BEGIN
  INSERT INTO audit(emp_id, old_sal, new_sal, what) VALUES (old.id, old.salary, new.salary, 'raise');
END;
CREATE TRIGGER emp_del BEFORE DELETE ON emp BEGIN
  INSERT INTO audit(emp_id, what) VALUES (old.id, 'delete');
END;
UPDATE emp SET salary = salary + 1000 WHERE dept_id = 1 AND id % 100 = 0;
DELETE FROM emp WHERE id BETWEEN 19990 AND 19995;
SELECT what, count(*), sum(new_sal - old_sal) FROM audit GROUP BY what ORDER BY what;
CREATE TABLE kv(k TEXT PRIMARY KEY, v INT, n INT DEFAULT 1) WITHOUT ROWID;
INSERT INTO kv(k,v) VALUES ('a',1),('b',2),('c',3);
INSERT INTO kv(k,v) VALUES ('a',10),('d',4) ON CONFLICT(k) DO UPDATE SET v = v + excluded.v, n = n + 1;
INSERT OR REPLACE INTO kv(k,v) VALUES ('b', 20);
INSERT OR IGNORE INTO kv(k,v) VALUES ('c', 30);
SELECT * FROM kv ORDER BY k;
UPDATE kv SET v = v * 2 WHERE k > 'a' RETURNING k, v;
DELETE FROM kv WHERE v > 30 RETURNING *;
SQL

sq "window functions" main.db <<'SQL'
.mode list
SELECT dept_id, name, salary,
  rank() OVER w, dense_rank() OVER w, row_number() OVER w,
  round(percent_rank() OVER w, 4), round(cume_dist() OVER w, 4), ntile(4) OVER w
FROM emp WHERE id <= 40 WINDOW w AS (PARTITION BY dept_id ORDER BY salary DESC)
ORDER BY dept_id, salary DESC, name;
SELECT id, salary,
  sum(salary) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND 2 FOLLOWING),
  avg(salary) OVER (ORDER BY id RANGE BETWEEN 3 PRECEDING AND CURRENT ROW),
  lag(salary, 1, -1) OVER (ORDER BY id), lead(name) OVER (ORDER BY id),
  first_value(name) OVER (ORDER BY id GROUPS BETWEEN 1 PRECEDING AND 1 FOLLOWING EXCLUDE CURRENT ROW),
  last_value(salary) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING),
  nth_value(salary, 3) OVER (ORDER BY id)
FROM emp WHERE id <= 15;
SELECT dept_id, count(*) FILTER (WHERE salary > 100000), max(salary) FILTER (WHERE hired < '2005') FROM emp GROUP BY dept_id;
SQL

sq "recursive CTEs" :memory: <<'SQL'
WITH RECURSIVE fib(n, a, b) AS (SELECT 1, 0, 1 UNION ALL SELECT n+1, b, a+b FROM fib WHERE n < 70)
SELECT n, a FROM fib WHERE n % 10 = 0;
WITH RECURSIVE
  xaxis(x) AS (VALUES(-2.0) UNION ALL SELECT x+0.05 FROM xaxis WHERE x<1.2),
  yaxis(y) AS (VALUES(-1.0) UNION ALL SELECT y+0.1 FROM yaxis WHERE y<1.0),
  m(iter, cx, cy, x, y) AS (
    SELECT 0, x, y, 0.0, 0.0 FROM xaxis, yaxis
    UNION ALL
    SELECT iter+1, cx, cy, x*x-y*y + cx, 2.0*x*y + cy FROM m
     WHERE (x*x + y*y) < 4.0 AND iter<28
  ),
  m2(iter, cx, cy) AS (SELECT max(iter), cx, cy FROM m GROUP BY cx, cy),
  a(t) AS (SELECT group_concat( substr(' .+*#', 1+min(iter/7,4), 1), '') FROM m2 GROUP BY cy)
SELECT group_concat(rtrim(t),x'0a') FROM a;
WITH RECURSIVE tree(id, parent, depth, path) AS (
  SELECT 1, NULL, 0, '1'
  UNION ALL
  SELECT tree.id*2 + k.v, tree.id, depth+1, path || '/' || (tree.id*2 + k.v)
  FROM tree, (SELECT 0 v UNION ALL SELECT 1) k WHERE depth < 4
) SELECT count(*), max(depth), max(path) FROM tree;
WITH RECURSIVE c(x) AS MATERIALIZED (SELECT 1 UNION SELECT x*3 % 1009 FROM c) SELECT count(*), sum(x) FROM c;
SQL

sq "json" :memory: <<'SQL'
.mode list
SELECT json('{"a":1,"b":[1,2,{"c":null}],"d":"x\u00e9"}');
SELECT json_extract('{"a":{"b":[10,20,30]}}', '$.a.b[1]'), '{"a":5}' -> '$.a', '{"a":"s"}' ->> 'a';
SELECT json_array(1, 2.5, 'three', NULL, json('{"x":1}')), json_object('k', 1, 'l', json_array());
SELECT json_insert('{"a":1}', '$.b', 2), json_replace('{"a":1}', '$.a', 'z'), json_set('{"a":1}', '$.c[#]', 3), json_remove('[0,1,2,3]', '$[1]', '$[0]');
SELECT json_patch('{"a":1,"b":{"c":2}}', '{"b":{"c":null,"d":4},"e":5}');
SELECT json_type('{"a":[1,true,null,"s",1.5]}', '$.a[' || value || ']') FROM generate_series(0, 4);
SELECT key, value, type, path FROM json_each('{"x":1,"y":[2,3],"z":{"w":"v"}}');
SELECT fullkey, atom, type FROM json_tree('{"a":[1,{"b":2}],"c":"d"}') ORDER BY id;
SELECT json_group_array(x), json_group_object(x, x*x) FROM (SELECT 1 x UNION SELECT 2 UNION SELECT 3);
SELECT json_valid('{"a":'), json_valid('[1,2]'), json_quote('a"b'), json_array_length('[1,[2,3],4]');
CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT);
INSERT INTO docs(body) SELECT json_object('n', value, 'sq', value*value, 'tags', json_array('t'||(value%3), 't'||(value%5))) FROM generate_series(1, 200);
SELECT count(*), sum(body->>'sq') FROM docs WHERE EXISTS (SELECT 1 FROM json_each(body, '$.tags') WHERE value = 't1');
SQL

sq "fts3/fts4/fts5" :memory: <<'SQL'
.mode list
CREATE VIRTUAL TABLE f3 USING fts3(title, body);
CREATE VIRTUAL TABLE f4 USING fts4(title, body, tokenize=porter);
CREATE VIRTUAL TABLE f5 USING fts5(title, body, tokenize='porter unicode61');
CREATE TABLE src(title, body);
INSERT INTO src VALUES
 ('SQLite', 'SQLite is a small, fast, self-contained, high-reliability, full-featured SQL database engine.'),
 ('zstd', 'Zstandard is a fast lossless compression algorithm targeting real-time compression scenarios.'),
 ('ELF', 'The Executable and Linkable Format is a common standard file format for executable files.'),
 ('x86-64', 'x86-64 is a 64-bit version of the x86 instruction set, first announced in 1999.'),
 ('Rust', 'Rust is a multi-paradigm, general-purpose programming language emphasizing performance.'),
 ('Debian', 'Debian is a Linux distribution composed of free and open-source software, developed by the community.'),
 ('compression', 'Lossless compression is a class of data compression that allows the original data to be perfectly reconstructed.');
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<300)
INSERT INTO src SELECT 'gen' || i, 'word' || (i%17) || ' filler ' || (i%5) || ' compressing databases' FROM n;
INSERT INTO f3 SELECT * FROM src;
INSERT INTO f4 SELECT * FROM src;
INSERT INTO f5 SELECT * FROM src;
SELECT title FROM f3 WHERE f3 MATCH 'compression' ORDER BY title;
SELECT title, snippet(f3) FROM f3 WHERE body MATCH 'fast' ORDER BY title;
SELECT count(*) FROM f4 WHERE f4 MATCH 'compress';
SELECT title, offsets(f4) FROM f4 WHERE f4 MATCH 'executable OR linux' ORDER BY title;
SELECT title, length(matchinfo(f4)) FROM f4 WHERE f4 MATCH '"lossless compression"' ORDER BY title;
SELECT count(*) FROM f4 WHERE f4 MATCH 'word3 NOT filler';
SELECT title, round(bm25(f5), 3), highlight(f5, 1, '[', ']') FROM f5 WHERE f5 MATCH 'compression' ORDER BY bm25(f5), title LIMIT 5;
SELECT title FROM f5 WHERE f5 MATCH 'title:sqlite OR body:rust' ORDER BY rank, title;
SELECT count(*) FROM f5 WHERE f5 MATCH 'word1* AND NEAR(filler databases, 3)';
SELECT title, snippet(f5, 1, '<', '>', '...', 4) FROM f5 WHERE f5 MATCH 'data' ORDER BY rank LIMIT 3;
INSERT INTO f5(f5) VALUES('optimize');
INSERT INTO f5(f5) VALUES('integrity-check');
INSERT INTO f4(f4) VALUES('optimize');
CREATE VIRTUAL TABLE f5v USING fts5vocab(f5, 'row');
SELECT term, doc, cnt FROM f5v WHERE term LIKE 'comp%' ORDER BY term;
DELETE FROM f5 WHERE title LIKE 'gen1%';
SELECT count(*) FROM f5 WHERE f5 MATCH 'word1';
SQL

sq "rtree" :memory: <<'SQL'
CREATE VIRTUAL TABLE boxes USING rtree(id, minx, maxx, miny, maxy);
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i<999)
INSERT INTO boxes SELECT i, (i*37)%1000, (i*37)%1000 + 5 + i%7, (i*91)%1000, (i*91)%1000 + 3 + i%11 FROM n;
SELECT count(*) FROM boxes WHERE minx >= 100 AND maxx <= 300 AND miny >= 200 AND maxy <= 700;
SELECT id FROM boxes WHERE minx <= 500 AND maxx >= 500 AND miny <= 500 AND maxy >= 500 ORDER BY id;
SELECT rtreecheck('boxes');
SQL

sq "functions" :memory: <<'SQL'
.mode list
SELECT abs(-5), round(3.14159, 3), round(-2.5), 7/2, 7.0/2, 7%3, -7%3, 1<<40, ~5, 5&3, 5|3, max(1,'a',2.5), min(3,1,2);
SELECT sqrt(2), pow(2, 10), exp(1), ln(10), log10(1000), log(2, 64), sin(pi()/6), cos(0), atan2(1,1), ceil(1.2), floor(-1.2), trunc(-1.7), degrees(pi()), radians(180), mod(10, 3);
SELECT upper('hello'), lower('ÀB'), length('héllo'), length(x'00ff'), substr('abcdef', 2, 3), substr('abcdef', -2), replace('aaa', 'a', 'bb'), trim('  x  '), ltrim('xxy', 'x'), rtrim('yxx', 'x'), instr('hello', 'll');
SELECT printf('%5d|%-5s|%05.2f|%x|%o|%e|%q|%Q|%w|%c|%%', 42, 'ab', 3.14159, 255, 8, 12345.678, 'it''s', NULL, 'a"b', 'xyz');
SELECT format('%.3s %10.4f %,d', 'abcdef', 2.0/3, 1234567), quote(x'0102'), quote('a''b'), quote(1.5), hex('AB'), unicode('€'), char(72, 105, 8364);
SELECT soundex('Robert'), soundex('Rupert'), typeof(1), typeof(1.0), typeof('1'), typeof(x'01'), typeof(NULL), coalesce(NULL, NULL, 3), ifnull(NULL, 'z'), nullif(1, 1), iif(1 > 2, 'a', 'b');
SELECT date('2024-02-28', '+1 day'), date('2023-02-28', '+1 day'), datetime('2020-01-01 12:00:00', '+90 minutes', 'start of day', '+1 month'), julianday('2000-01-01'), strftime('%j %W %w %s', '2021-12-31 23:59:59'), time('12:34:56.789'), unixepoch('1970-01-02'), date(0, 'unixepoch'), date('2022-01-31', 'weekday 0');
SELECT 'abc' LIKE 'A%', 'abc' GLOB 'A*', 'abc' GLOB 'a[a-c]c', 'x' BETWEEN 'a' AND 'z', 5 IN (1,5), CAST('12abc' AS INTEGER), CAST(3.9 AS INT), CAST(10 AS TEXT) || 'x', CAST('1e3' AS REAL);
SELECT total_changes() >= 0, zeroblob(4), length(randomblob(16)), likely(1), unlikely(0), likelihood(1, 0.5), sqlite_compileoption_used('ENABLE_FTS5');
SELECT 9223372036854775807 + 1, -9223372036854775808 - 1, 1e308 * 10, 0.1 + 0.2, 1/0, 1.0/0, 100000000000000000000;
SELECT value, value * value FROM generate_series(1, 20, 3);
SQL

sq "blobs + collation + typing" :memory: <<'SQL'
CREATE TABLE t(a TEXT COLLATE NOCASE, b BLOB, c ANY, d NUMERIC, e INT);
INSERT INTO t VALUES ('Apple', x'00', 1, '1.0', '007'), ('apple', x'0001', '1', '1e2', 3.0), ('BANANA', NULL, 1.5, 'abc', '9x'), ('banana', x'ff', x'41', 12, NULL), ('cherry', zeroblob(3), NULL, '  5 ', 5.5);
SELECT a, hex(b), typeof(c), c, typeof(d), d, typeof(e), e FROM t ORDER BY a, rowid;
SELECT DISTINCT a FROM t ORDER BY 1;
SELECT a FROM t ORDER BY a COLLATE BINARY;
SELECT a FROM t ORDER BY a COLLATE RTRIM DESC;
SELECT count(*) FROM t WHERE a = 'APPLE';
SELECT b < x'01', b = x'00' FROM t ORDER BY rowid;
CREATE TABLE s(x INTEGER, y TEXT) STRICT;
INSERT INTO s VALUES (1, 'a');
INSERT INTO s VALUES ('2', 'b');
SELECT * FROM s;
SQL

sqnb "expected errors" :memory: <<'SQL'
CREATE TABLE u(a INTEGER PRIMARY KEY, b TEXT UNIQUE NOT NULL, c INT CHECK (c < 10));
INSERT INTO u VALUES (1, 'x', 1);
INSERT INTO u VALUES (1, 'y', 2);
INSERT INTO u VALUES (2, 'x', 3);
INSERT INTO u VALUES (3, NULL, 3);
INSERT INTO u VALUES (4, 'z', 11);
SELECT * FROM nosuchtable;
SELECT nosuchcol FROM u;
SELEC 1;
SELECT abs(-9223372036854775808);
SELECT json('{bad');
CREATE TABLE s(x INT) STRICT;
INSERT INTO s VALUES ('abc');
SELECT count(*) FROM u;
SQL
sqnb "bail on error" -bail :memory: "select 1; select * from missing; select 2;"

sq "transactions + savepoints" tx.db <<'SQL'
CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INT);
INSERT INTO acct VALUES (1, 100), (2, 50);
BEGIN;
UPDATE acct SET bal = bal - 30 WHERE id = 1;
SAVEPOINT sp1;
UPDATE acct SET bal = bal + 30 WHERE id = 2;
SAVEPOINT sp2;
DELETE FROM acct;
ROLLBACK TO sp2;
RELEASE sp1;
SELECT * FROM acct;
ROLLBACK;
SELECT * FROM acct;
BEGIN IMMEDIATE;
INSERT INTO acct VALUES (3, 7);
COMMIT;
SELECT sum(bal), count(*) FROM acct;
PRAGMA foreign_keys=ON;
CREATE TABLE child(id INTEGER PRIMARY KEY, acct_id INT REFERENCES acct(id) ON DELETE CASCADE);
INSERT INTO child VALUES (1, 1), (2, 1), (3, 2);
DELETE FROM acct WHERE id = 1;
SELECT count(*) FROM child;
PRAGMA foreign_key_check;
SQL

sq "attach" main.db <<'SQL'
ATTACH 'tx.db' AS other;
ATTACH ':memory:' AS mem;
CREATE TABLE mem.t AS SELECT id, bal FROM other.acct;
SELECT m.id, m.bal, d.name FROM mem.t m LEFT JOIN dept d ON d.id = m.id ORDER BY m.id;
SELECT name, file <> '' FROM pragma_database_list ORDER BY seq;
DETACH other;
SQL

# CSV import (with quoting, embedded commas/newlines, header row)
cat > people.csv <<'CSV'
id,name,city,score,comment
1,Alice,Paris,91.5,"likes ""quotes"""
2,Bob,"Berlin, DE",78,
3,Chloé,Zürich,88.25,"multi
line"
4,Dan,Oslo,-3,plain
5,Eve,,100,"a,b,c"
CSV
printf 'x\ty\n1\ta\n2\tb\n3\tc\n' > tabs.tsv
sq "import csv" imp.db <<'SQL'
.import --csv people.csv people
.mode tabs
.import tabs.tsv tabbed
.schema people
SELECT count(*), sum(score), group_concat(city, '|') FROM people;
SELECT * FROM people WHERE comment LIKE '%"%' OR comment LIKE '%,%' ORDER BY id;
SELECT typeof(x), x, y FROM tabbed ORDER BY rowid;
.import --csv --skip 1 people.csv people2
SELECT count(*) FROM people2;
SQL

sq "output modes" imp.db <<'SQL'
.headers on
.mode csv
SELECT id, name, comment FROM people ORDER BY id;
.mode json
SELECT id, name, score FROM people ORDER BY id LIMIT 3;
.mode box
SELECT id, name, city FROM people ORDER BY id;
.mode markdown
SELECT id, name FROM people ORDER BY id LIMIT 2;
.mode table
SELECT id, score FROM people ORDER BY id LIMIT 2;
.mode html
SELECT id, name FROM people WHERE id = 1;
.mode insert people_copy
SELECT * FROM people ORDER BY id LIMIT 2;
.mode line
SELECT * FROM people WHERE id = 5;
.mode quote
SELECT id, name, x'00ff' FROM people WHERE id < 3;
.mode column
.width 4 -10
SELECT id, name FROM people ORDER BY id;
.mode list
.separator | ;
.nullvalue NULL
SELECT id, city FROM people ORDER BY id;
.mode ascii
SELECT 1, 2;
SQL
echo

sq "shell meta commands" main.db <<'SQL'
.tables
.indexes emp
.schema dept
.fullschema --indent
.databases
.show
.stats off
.eqp on
SELECT name FROM emp WHERE dept_id = 2 AND salary > 119000 ORDER BY salary;
.eqp off
.parameter init
.parameter set :lo 10
.parameter set :hi 12
SELECT id, name FROM emp WHERE id BETWEEN :lo AND :hi;
.parameter list
.print done
SQL

sq "explain + dbstat" main.db <<'SQL'
EXPLAIN QUERY PLAN SELECT d.name, count(*) FROM emp e JOIN dept d ON d.id = e.dept_id WHERE e.salary > 50000 GROUP BY d.name;
EXPLAIN QUERY PLAN SELECT * FROM emp WHERE name = 'emp00042';
EXPLAIN QUERY PLAN SELECT * FROM emp WHERE substr(name, 4, 2) = '01' AND salary % 1000 = 5;
EXPLAIN SELECT name FROM emp WHERE hired > '2010' ORDER BY salary LIMIT 3;
SELECT name, count(*) AS pages, sum(ncell), sum(payload) FROM dbstat GROUP BY name ORDER BY name;
SQL

sq "dump + reload" main.db ".dump dept kv audit" > dump.sql
cat dump.sql
$T "$SQLITE3" main.db .dump > full.sql; echo "dump rc=$?"
sq "reload" reload.db < full.sql
sq "compare reloaded" reload.db <<'SQL'
ATTACH 'main.db' AS orig;
SELECT (SELECT count(*) FROM emp), (SELECT count(*) FROM orig.emp);
SELECT count(*) FROM (SELECT * FROM emp EXCEPT SELECT * FROM orig.emp);
SELECT count(*) FROM (SELECT * FROM orig.emp EXCEPT SELECT * FROM emp);
SELECT group_concat(name) FROM (SELECT name FROM sqlite_schema WHERE type='index' ORDER BY name);
PRAGMA integrity_check;
SQL

sq "backup/restore" main.db ".backup bak.db"
sq "restore" restored.db <<'SQL'
.restore bak.db
SELECT count(*), sum(salary) FROM emp;
PRAGMA quick_check;
SQL

sq "vacuum" main.db <<'SQL'
PRAGMA secure_delete;
DELETE FROM emp WHERE id % 3 = 0;
SELECT page_count > 0, freelist_count > 0 FROM pragma_page_count, pragma_freelist_count;
VACUUM;
SELECT freelist_count FROM pragma_freelist_count;
VACUUM INTO 'vac.db';
PRAGMA integrity_check;
SELECT count(*), sum(salary) FROM emp;
SQL
sq "vacuumed copy" vac.db "PRAGMA integrity_check; SELECT count(*), sum(salary) FROM emp;"

sq "wal mode" wal.db <<'SQL'
PRAGMA journal_mode=WAL;
CREATE TABLE w(a INTEGER PRIMARY KEY, b TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<5000)
INSERT INTO w SELECT i, hex(i*i) FROM n;
PRAGMA wal_checkpoint(TRUNCATE);
UPDATE w SET b = lower(b) WHERE a % 2 = 0;
SELECT count(*), max(b), min(b) FROM w;
PRAGMA journal_mode=DELETE;
PRAGMA integrity_check;
SQL

sq "incremental blob + autovacuum" av.db <<'SQL'
PRAGMA auto_vacuum=INCREMENTAL;
CREATE TABLE big(id INTEGER PRIMARY KEY, data BLOB);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<300)
INSERT INTO big SELECT i, zeroblob(2000 + i*10) FROM n;
DELETE FROM big WHERE id > 100;
PRAGMA incremental_vacuum(50);
SELECT count(*), sum(length(data)) FROM big;
PRAGMA integrity_check;
SQL

sq "sha3 + misc" main.db <<'SQL'
.sha3sum
SELECT hex(sha3('abc')), hex(sha3('abc', 384));
SELECT hex(sha3_query('SELECT name FROM dept ORDER BY id'));
SELECT decimal_add('1.000000000000000000001', '2'), decimal_mul('1.5', '1.5'), decimal_sum(value) FROM generate_series(1, 10);
SELECT ieee754(2.5), ieee754_mantissa(10.0), ieee754_exponent(10.0);
SELECT 'abc123' REGEXP '[0-9]+', 'hello' REGEXP '^h.*o$', 'x' REGEXP 'y';
SELECT uint_cmp FROM (SELECT 1 AS uint_cmp);
SELECT name FROM dept ORDER BY name COLLATE uint;
SQL

sq "integrity" main.db <<'SQL'
PRAGMA integrity_check;
PRAGMA foreign_key_check;
SELECT count(*) FROM emp;
SELECT name, type FROM sqlite_schema ORDER BY name;
SQL

# a larger sort / temp b-tree exercise
sq "sort heavy" :memory: <<'SQL'
PRAGMA cache_size=50;
CREATE TABLE r(a, b, c);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<60000)
INSERT INTO r SELECT (i*2654435761) % 100003, printf('%08x', (i*40503) % 65536), i FROM n;
SELECT sum(c) FROM (SELECT c FROM r ORDER BY a, b LIMIT 100);
SELECT count(DISTINCT a), count(DISTINCT b) FROM r;
SELECT b, count(*) FROM r GROUP BY b ORDER BY count(*) DESC, b LIMIT 3;
CREATE INDEX r_ab ON r(a, b);
SELECT a, b, c FROM r ORDER BY a DESC, b LIMIT 3;
SQL
echo "=== files"
for f in main.db tx.db imp.db reload.db restored.db vac.db wal.db av.db; do
    [[ -f $f ]] && echo "$f present"
done
echo "=== end"
}
# the scratch directory's name shows up in .databases and the like
battery | sed "s|$D|@SCRATCH@|g"
exit "${PIPESTATUS[0]}"
