"""The Python interpreter's standard library at work: extension modules loaded
with dlopen (json, zlib, bz2, lzma, decimal, hashlib, sqlite3, mmap), file
I/O in a temporary directory and os.walk over the directory given as argv[1].
Prints deterministic results."""
import bz2
import decimal
import hashlib
import json
import lzma
import mmap
import os
import sqlite3
import sys
import tempfile
import zlib

data = json.dumps({"k%d" % i: list(range(i % 7)) for i in range(500)}, sort_keys=True).encode()
print("json bytes:", len(data), hashlib.sha256(data).hexdigest())
print("zlib:", zlib.crc32(zlib.compress(data, 9)), len(zlib.decompress(zlib.compress(data))))
print("bz2 roundtrip:", bz2.decompress(bz2.compress(data)) == data)
print("lzma roundtrip:", lzma.decompress(lzma.compress(data)) == data)
decimal.getcontext().prec = 50
print("decimal:", decimal.Decimal(1) / decimal.Decimal(7))
print("sha512/md5:", hashlib.sha512(data).hexdigest()[:32], hashlib.md5(data).hexdigest())

db = sqlite3.connect(":memory:")
db.execute("create table t (k integer primary key, v text)")
db.executemany("insert into t values (?, ?)", [(i, "v%05d" % (i * 7919 % 10007)) for i in range(2000)])
print("sqlite:", db.execute("select count(*), min(v), max(v), sum(k) from t").fetchone())

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "file.bin")
    with open(path, "wb") as f:
        for i in range(64):
            f.write(bytes([i]) * 4096)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[0:4] = b"FERR"
        print("mmap:", len(m), m[0:4], m[4096 * 63])
    st = os.stat(path)
    print("file size:", st.st_size, "listdir:", os.listdir(tmp))

if len(sys.argv) > 1:
    for root, dirs, files in os.walk(sys.argv[1]):
        dirs.sort()
        rel = os.path.relpath(root, sys.argv[1])
        for name in sorted(files):
            p = os.path.join(root, name)
            st = os.lstat(p)
            print("walk:", os.path.join(rel, name), st.st_size, oct(st.st_mode))
