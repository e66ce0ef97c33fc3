#!/usr/bin/env python3
"""Reads TensorBoard event files with the standard library only: checks every
record's framing and both masked CRC32C, decodes the Event protobufs and
returns the scalars. As a script: tb_events.py FILE prints tag, step, value.

    from tb_events import read_scalars
    scalars = read_scalars(path)   # {tag: [(step, value), ...]}; raises ValueError"""
import struct
import sys

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(b, i):
    v = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def _fields(b):
    """(field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        if i > len(b):
            raise ValueError("field runs past the message")
        yield field, wt, v


def records(path):
    """Each record's data, after checking the length and data CRCs."""
    raw = open(path, "rb").read()
    i = 0
    while i < len(raw):
        if i + 12 > len(raw):
            raise ValueError(f"truncated record header at byte {i}")
        head = raw[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", raw[i + 8:i + 12])
        if hc != masked_crc(head):
            raise ValueError(f"length CRC mismatch at byte {i}")
        data = raw[i + 12:i + 12 + n]
        if len(data) != n or i + 16 + n > len(raw):
            raise ValueError(f"truncated record at byte {i}")
        (dc,) = struct.unpack("<I", raw[i + 12 + n:i + 16 + n])
        if dc != masked_crc(data):
            raise ValueError(f"data CRC mismatch in the record at byte {i}")
        yield data
        i += 16 + n


def read_scalars(path):
    out, version = {}, None
    for rec in records(path):
        step, summary = 0, None
        for f, wt, v in _fields(rec):
            if f == 2 and wt == 0:
                step = v
            elif f == 3 and wt == 2:
                version = v.decode()
            elif f == 5 and wt == 2:
                summary = v
        if summary is None:
            continue
        for f, wt, val in _fields(summary):
            if f != 1:
                continue
            tag = value = None
            for g, wt2, x in _fields(val):
                if g == 1 and wt2 == 2:
                    tag = x.decode()
                elif g == 2 and wt2 == 5:
                    (value,) = struct.unpack("<f", x)
            if tag is None or value is None:
                raise ValueError("a summary value without tag or simple_value")
            out.setdefault(tag, []).append((step, value))
    if version != "brain.Event:2":
        raise ValueError(f"file_version is {version!r}, not brain.Event:2")
    return out


if __name__ == "__main__":
    for tag, pts in sorted(read_scalars(sys.argv[1]).items()):
        for step, v in pts:
            print(f"{tag}\t{step}\t{v:.7g}")
