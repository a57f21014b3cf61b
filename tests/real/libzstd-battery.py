#!/usr/bin/env python3
"""Exercise a libzstd.so.1 through its C API (ctypes), deterministic output.

    tests/real/libzstd-battery.py /path/to/libzstd.so.1

Debian's /usr/bin/zstd links libzstd statically, so its shared library is
not reached by the zstd program; this battery loads the library itself and
prints md5 sums of compressed frames (simple API at levels -5..19, the
advanced API with parameters, the streaming API, dictionaries), round-trip
checks and error names.  Compare the output of the original and the
rewritten library.
"""
import ctypes
import hashlib
import sys

lib = ctypes.CDLL(sys.argv[1])
c = ctypes
sz = c.c_size_t
lib.ZSTD_versionNumber.restype = c.c_uint
lib.ZSTD_versionString.restype = c.c_char_p
lib.ZSTD_compressBound.restype = sz
lib.ZSTD_compressBound.argtypes = [sz]
lib.ZSTD_compress.restype = sz
lib.ZSTD_compress.argtypes = [c.c_void_p, sz, c.c_void_p, sz, c.c_int]
lib.ZSTD_decompress.restype = sz
lib.ZSTD_decompress.argtypes = [c.c_void_p, sz, c.c_void_p, sz]
lib.ZSTD_isError.restype = c.c_uint
lib.ZSTD_isError.argtypes = [sz]
lib.ZSTD_getErrorName.restype = c.c_char_p
lib.ZSTD_getErrorName.argtypes = [sz]
lib.ZSTD_getFrameContentSize.restype = c.c_ulonglong
lib.ZSTD_getFrameContentSize.argtypes = [c.c_void_p, sz]
lib.ZSTD_createCCtx.restype = c.c_void_p
lib.ZSTD_freeCCtx.argtypes = [c.c_void_p]
lib.ZSTD_createDCtx.restype = c.c_void_p
lib.ZSTD_freeDCtx.argtypes = [c.c_void_p]
lib.ZSTD_CCtx_setParameter.restype = sz
lib.ZSTD_CCtx_setParameter.argtypes = [c.c_void_p, c.c_int, c.c_int]
lib.ZSTD_CCtx_reset.restype = sz
lib.ZSTD_CCtx_reset.argtypes = [c.c_void_p, c.c_int]
lib.ZSTD_compress2.restype = sz
lib.ZSTD_compress2.argtypes = [c.c_void_p, c.c_void_p, sz, c.c_void_p, sz]
lib.ZSTD_decompressDCtx.restype = sz
lib.ZSTD_decompressDCtx.argtypes = [c.c_void_p, c.c_void_p, sz, c.c_void_p, sz]
lib.ZSTD_compress_usingDict.restype = sz
lib.ZSTD_compress_usingDict.argtypes = [c.c_void_p, c.c_void_p, sz, c.c_void_p, sz, c.c_void_p, sz, c.c_int]
lib.ZSTD_decompress_usingDict.restype = sz
lib.ZSTD_decompress_usingDict.argtypes = [c.c_void_p, c.c_void_p, sz, c.c_void_p, sz, c.c_void_p, sz]
lib.ZDICT_trainFromBuffer.restype = sz
lib.ZDICT_trainFromBuffer.argtypes = [c.c_void_p, sz, c.c_void_p, c.POINTER(sz), c.c_uint]
lib.ZDICT_isError.restype = c.c_uint
lib.ZDICT_isError.argtypes = [sz]
lib.ZSTD_getDictID_fromFrame.restype = c.c_uint
lib.ZSTD_getDictID_fromFrame.argtypes = [c.c_void_p, sz]


class InBuf(c.Structure):
    _fields_ = [("src", c.c_void_p), ("size", sz), ("pos", sz)]


class OutBuf(c.Structure):
    _fields_ = [("dst", c.c_void_p), ("size", sz), ("pos", sz)]


lib.ZSTD_compressStream2.restype = sz
lib.ZSTD_compressStream2.argtypes = [c.c_void_p, c.POINTER(OutBuf), c.POINTER(InBuf), c.c_int]
lib.ZSTD_decompressStream.restype = sz
lib.ZSTD_decompressStream.argtypes = [c.c_void_p, c.POINTER(OutBuf), c.POINTER(InBuf)]


def md5(b):
    return hashlib.md5(b).hexdigest()


def check(r):
    if lib.ZSTD_isError(r):
        raise RuntimeError(lib.ZSTD_getErrorName(r).decode())
    return r


def make_data(n, seed):
    # deterministic, moderately compressible text-like data
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta",
             b"theta", b"iota", b"kappa", b"lambda", b"mu", b"\n", b"0123456789"]
    out = bytearray()
    x = seed
    while len(out) < n:
        x = (x * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        out += words[(x >> 33) % len(words)]
        out += b" " if (x >> 20) & 3 else b", "
    return bytes(out[:n])


def compress(data, level):
    bound = lib.ZSTD_compressBound(len(data))
    dst = c.create_string_buffer(bound)
    n = check(lib.ZSTD_compress(dst, bound, data, len(data), level))
    return dst.raw[:n]


def decompress(frame, size):
    dst = c.create_string_buffer(max(size, 1))
    n = check(lib.ZSTD_decompress(dst, size, frame, len(frame)))
    return dst.raw[:n]


print("version", lib.ZSTD_versionNumber(), lib.ZSTD_versionString().decode())
inputs = {
    "text64k": make_data(65536, 1),
    "text1m": make_data(1 << 20, 2),
    "tiny": b"hello, hello, hello",
    "empty": b"",
    "zeros": bytes(200000),
}
for name, data in inputs.items():
    print("input", name, len(data), md5(data))

print("=== simple API")
for level in [-5, -1, 1, 2, 3, 5, 7, 9, 12, 15, 17, 19]:
    for name in ["text64k", "tiny", "empty", "zeros"]:
        data = inputs[name]
        frame = compress(data, level)
        back = decompress(frame, len(data))
        fcs = lib.ZSTD_getFrameContentSize(frame, len(frame))
        print(f"level {level} {name} csize={len(frame)} md5={md5(frame)} fcs={fcs} ok={back == data}")
big = compress(inputs["text1m"], 3)
print("text1m level 3", len(big), md5(big), decompress(big, 1 << 20) == inputs["text1m"])

print("=== advanced API")
ZSTD_c_compressionLevel, ZSTD_c_windowLog, ZSTD_c_checksumFlag, ZSTD_c_strategy = 100, 101, 201, 107
ZSTD_c_enableLongDistanceMatching, ZSTD_c_contentSizeFlag, ZSTD_c_nbWorkers = 160, 200, 400
cctx = lib.ZSTD_createCCtx()
dctx = lib.ZSTD_createDCtx()
for params in [
    [(ZSTD_c_compressionLevel, 4), (ZSTD_c_checksumFlag, 1)],
    [(ZSTD_c_compressionLevel, 12), (ZSTD_c_windowLog, 18)],
    [(ZSTD_c_strategy, 9), (ZSTD_c_windowLog, 20)],
    [(ZSTD_c_compressionLevel, 6), (ZSTD_c_enableLongDistanceMatching, 1), (ZSTD_c_contentSizeFlag, 0)],
    [(ZSTD_c_compressionLevel, 3), (ZSTD_c_nbWorkers, 2)],
]:
    check(lib.ZSTD_CCtx_reset(cctx, 3))
    for k, v in params:
        check(lib.ZSTD_CCtx_setParameter(cctx, k, v))
    data = inputs["text1m"]
    bound = lib.ZSTD_compressBound(len(data))
    dst = c.create_string_buffer(bound)
    n = check(lib.ZSTD_compress2(cctx, dst, bound, data, len(data)))
    frame = dst.raw[:n]
    out = c.create_string_buffer(len(data))
    m = check(lib.ZSTD_decompressDCtx(dctx, out, len(data), frame, n))
    print("params", params, "csize", n, md5(frame), "ok", out.raw[:m] == data)

print("=== streaming API")
check(lib.ZSTD_CCtx_reset(cctx, 3))
check(lib.ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 5))
data = inputs["text1m"]
chunks = []
outbuf = c.create_string_buffer(1 << 16)
for off in range(0, len(data), 100000):
    piece = data[off:off + 100000]
    inb = InBuf(c.cast(c.c_char_p(piece), c.c_void_p), len(piece), 0)
    last = off + 100000 >= len(data)
    while True:
        ob = OutBuf(c.cast(outbuf, c.c_void_p), len(outbuf), 0)
        rem = check(lib.ZSTD_compressStream2(cctx, c.byref(ob), c.byref(inb), 2 if last else 0))
        chunks.append(outbuf.raw[:ob.pos])
        if (last and rem == 0) or (not last and inb.pos == inb.size):
            break
stream = b"".join(chunks)
print("stream csize", len(stream), md5(stream))
res = bytearray()
inb = InBuf(c.cast(c.c_char_p(stream), c.c_void_p), len(stream), 0)
while inb.pos < inb.size:
    ob = OutBuf(c.cast(outbuf, c.c_void_p), len(outbuf), 0)
    check(lib.ZSTD_decompressStream(dctx, c.byref(ob), c.byref(inb)))
    res += outbuf.raw[:ob.pos]
print("stream roundtrip", bytes(res) == data)

print("=== dictionary")
samples = [b'{"id":%d,"user":"name%d","mail":"u%d@example.org","n":%d}' % (i, i % 50, i, i * 7 % 100)
           for i in range(2000)]
joined = b"".join(samples)
sizes = (sz * len(samples))(*[len(s) for s in samples])
dictbuf = c.create_string_buffer(4096)
dn = lib.ZDICT_trainFromBuffer(dictbuf, 4096, joined, sizes, len(samples))
print("trained", lib.ZDICT_isError(dn) == 0, dn, md5(dictbuf.raw[:dn]))
d = dictbuf.raw[:dn]
for i in [0, 1, 777, 1999]:
    s = samples[i]
    dst = c.create_string_buffer(256)
    n = check(lib.ZSTD_compress_usingDict(cctx, dst, 256, s, len(s), d, len(d), 9))
    frame = dst.raw[:n]
    out = c.create_string_buffer(256)
    m = check(lib.ZSTD_decompress_usingDict(dctx, out, 256, frame, n, d, len(d)))
    print("dict sample", i, n, md5(frame), lib.ZSTD_getDictID_fromFrame(frame, n) != 0, out.raw[:m] == s)

print("=== errors")
frame = compress(inputs["text64k"], 3)
for what, buf, cap in [("truncated", frame[:100], 65536), ("too small dst", frame, 100),
                       ("garbage", b"not a zstd frame at all", 1000)]:
    dst = c.create_string_buffer(cap)
    r = lib.ZSTD_decompress(dst, cap, buf, len(buf))
    print(what, bool(lib.ZSTD_isError(r)), lib.ZSTD_getErrorName(r).decode())
print("bad param", lib.ZSTD_getErrorName(lib.ZSTD_CCtx_setParameter(cctx, 999, 1)).decode())
lib.ZSTD_freeCCtx(cctx)
lib.ZSTD_freeDCtx(dctx)
print("=== end")
