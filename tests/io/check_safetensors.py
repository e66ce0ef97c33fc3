#!/usr/bin/env python3
"""Independent check (Python stdlib only) that ringpipe's model.safetensors follows
the safetensors spec and Hugging Face GPT-2 conventions.

Runs st_tool to write a tiny model as a checkpoint and as an llm.c file, then:
- header: u64 little-endian length, UTF-8 JSON object, no duplicate keys, padded
  with spaces to a multiple of 8; __metadata__ maps str -> str with format "pt";
- every tensor: dtype F32, integer shape, data_offsets contiguous from 0 and
  covering the whole data section exactly (what the safetensors library demands);
- GPT-2 names and shapes; Conv1D weights are the transpose of llm.c's (out, in);
  wte holds the first V rows of llm.c's padded table;
- meta.json is valid JSON with format/version/step.
Exit status 0 on success, 1 with a message otherwise."""
import json, os, struct, subprocess, sys, tempfile


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def no_dups(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail("duplicate keys in JSON object")
    return dict(pairs)


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([tool, d], check=True)
        raw = open(os.path.join(d, "ck", "model.safetensors"), "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        if n % 8:
            fail(f"header length {n} is not a multiple of 8")
        text = raw[8:8 + n].decode("utf-8")
        if text != text.rstrip(" ") + " " * (len(text) - len(text.rstrip(" "))):
            fail("padding is not spaces")
        hdr = json.loads(text, object_pairs_hook=no_dups)
        meta = hdr.pop("__metadata__", None)
        if not isinstance(meta, dict) or meta.get("format") != "pt":
            fail(f"__metadata__ {meta!r} lacks format=pt")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            fail("__metadata__ values must be strings")
        data = raw[8 + n:]
        spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in hdr.items())
        pos = 0
        for b, e, k in spans:
            if b != pos:
                fail(f"{k}: data starts at {b}, expected {pos} (hole or overlap)")
            pos = e
        if pos != len(data):
            fail(f"tensors cover {pos} bytes of a {len(data)}-byte data section")
        for k, v in hdr.items():
            if v["dtype"] != "F32" or not all(isinstance(s, int) for s in v["shape"]):
                fail(f"{k}: bad dtype/shape {v}")
            numel = 1
            for s in v["shape"]:
                numel *= s
            if numel * 4 != v["data_offsets"][1] - v["data_offsets"][0]:
                fail(f"{k}: shape {v['shape']} does not match its byte range")

        def tensor(name):
            v = hdr[name]
            b, e = v["data_offsets"]
            return v["shape"], struct.unpack(f"<{(e - b) // 4}f", data[b:e])

        # the llm.c file of the same model, read independently
        m = open(os.path.join(d, "model.bin"), "rb").read()
        h = struct.unpack("<256i", m[:1024])
        if h[0] != 20240326 or h[1] != 3:
            fail(f"llm.c header {h[:8]}")
        T, V, L, NH, C, Vp = h[2:8]
        p = struct.unpack(f"<{(len(m) - 1024) // 4}f", m[1024:])
        sizes = [("wte", Vp * C), ("wpe", T * C), ("ln1w", L * C), ("ln1b", L * C),
                 ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C),
                 ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C),
                 ("fcb", L * 4 * C), ("fcprojw", L * 4 * C * C), ("fcprojb", L * C),
                 ("lnfw", C), ("lnfb", C)]
        llmc, off = {}, 0
        for k, s in sizes:
            llmc[k] = p[off:off + s]
            off += s
        if off != len(p):
            fail("llm.c file size does not match its header")

        def check(name, shape, values):
            got_shape, got = tensor(name)
            if got_shape != shape:
                fail(f"{name}: shape {got_shape}, expected {shape}")
            if list(got) != list(values):
                fail(f"{name}: values differ from the llm.c file")

        def transpose(flat, rows, cols):  # flat is (rows, cols); returns (cols, rows)
            return [flat[r * cols + c] for c in range(cols) for r in range(rows)]

        check("wte.weight", [V, C], llmc["wte"][:V * C])
        check("wpe.weight", [T, C], llmc["wpe"])
        check("ln_f.weight", [C], llmc["lnfw"])
        for l in range(L):
            def lay(k, per):
                return llmc[k][l * per:(l + 1) * per]
            check(f"h.{l}.ln_1.weight", [C], lay("ln1w", C))
            check(f"h.{l}.ln_2.bias", [C], lay("ln2b", C))
            check(f"h.{l}.attn.c_attn.weight", [C, 3 * C], transpose(lay("qkvw", 3 * C * C), 3 * C, C))
            check(f"h.{l}.attn.c_attn.bias", [3 * C], lay("qkvb", 3 * C))
            check(f"h.{l}.attn.c_proj.weight", [C, C], transpose(lay("attprojw", C * C), C, C))
            check(f"h.{l}.mlp.c_fc.weight", [C, 4 * C], transpose(lay("fcw", 4 * C * C), 4 * C, C))
            check(f"h.{l}.mlp.c_proj.weight", [4 * C, C], transpose(lay("fcprojw", 4 * C * C), C, 4 * C))
            check(f"h.{l}.mlp.c_proj.bias", [C], lay("fcprojb", C))
        if len(hdr) != 2 + 12 * L + 2:
            fail(f"{len(hdr)} tensors, expected {2 + 12 * L + 2}")
        meta_json = json.load(open(os.path.join(d, "ck", "meta.json")))
        if meta_json.get("format") != "ringpipe-checkpoint" or meta_json.get("step") != 5:
            fail(f"meta.json {meta_json}")
        print(f"ok: {len(hdr)} tensors, header {n} bytes, data {len(data)} bytes")


if __name__ == "__main__":
    main()
