#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz (corpus/<target>/). Names say what the
replay test expects: ok-* must be accepted, bad-* refused (see fuzz_replay.c).
Inputs a fuzzer found are added by hand as crash-* (any outcome but a crash).

    python3 tests/fuzz/make_corpus.py [build/ringpipe]

With the ringpipe binary, schedule seeds also include every generator's
lowered CSV from `ringpipe sim --csv`."""
import json, os, struct, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- token shards: int32 header[256] (magic, version, count), uint16 tokens
def shard(tokens, magic=20240520, version=1, count=None):
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, len(tokens) if count is None else count
    return struct.pack("<256i", *h) + struct.pack("<%dH" % len(tokens), *tokens)


def shards():
    for n in (0, 1, 3, 10, 100):
        put("shard", "ok-%d-tokens" % n, shard([(i * 37) % 256 for i in range(n)]))
    put("shard", "ok-max-byte-token", shard([255, 0, 255, 1]))
    put("shard", "bad-token-beyond-vocab", shard([1, 2, 300, 4]))
    put("shard", "bad-token-65535", shard([65535] * 5))
    put("shard", "bad-magic", shard([1, 2, 3], magic=20240521))
    put("shard", "bad-llmc-model-magic", shard([1, 2, 3], magic=20240326))
    put("shard", "bad-u32-shard-magic", shard([1, 2, 3], magic=20240801))
    put("shard", "bad-version", shard([1, 2, 3], version=2))
    put("shard", "bad-negative-count", shard([1, 2, 3], count=-1))
    put("shard", "bad-truncated", shard([1, 2, 3], count=10))
    put("shard", "bad-extra-bytes", shard([1, 2, 3]) + b"\x00\x00")
    put("shard", "bad-odd-byte", shard([1, 2, 3]) + b"\x01")
    put("shard", "bad-too-small", shard([])[:100])
    put("shard", "bad-empty", b"")
    put("shard", "bad-huge-count", shard([1], count=2**31 - 1))


# ---- safetensors: u64 header length, JSON header, data
# ---- document indexes beside the fuzz target's 64-token shard: int32 header[8]
# (magic, version, count, 0...), uint32 lengths summing to 64
def docidx(lens, magic=20261212, version=1, count=None):
    n = len(lens) if count is None else count
    return struct.pack("<8i", magic, version, n, 0, 0, 0, 0, 0) + struct.pack("<%dI" % len(lens), *lens)


def doc_indexes():
    put("doc_index", "ok-one-document", docidx([64]))
    put("doc_index", "ok-mixed-lengths", docidx([1, 13, 1, 20, 5, 24]))
    put("doc_index", "ok-longer-than-row", docidx([40, 24]))
    put("doc_index", "ok-all-ones", docidx([1] * 64))
    put("doc_index", "bad-sum-short", docidx([30, 30]))
    put("doc_index", "bad-sum-long", docidx([64, 1]))
    put("doc_index", "bad-zero-length", docidx([0, 64]))
    put("doc_index", "bad-magic", docidx([64], magic=20240520))
    put("doc_index", "bad-version", docidx([64], version=2))
    put("doc_index", "bad-count-too-big", docidx([64], count=1000))
    put("doc_index", "bad-negative-count", docidx([64], count=-1))
    put("doc_index", "bad-truncated-header", docidx([64])[:12])
    put("doc_index", "bad-empty", b"")
    put("doc_index", "bad-huge-length", docidx([0xFFFFFFFF, 65]))


def st(header, data=b"", hlen=None, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    while pad and len(h) % 8:
        h += b" "
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def f32(*xs):
    return struct.pack("<%df" % len(xs), *xs)


def safetensors():
    one = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    put("safetensors", "ok-one-tensor", st(one, f32(1, 2)))
    put("safetensors", "ok-empty-header", st({}))
    put("safetensors", "ok-metadata", st({"__metadata__": {"format": "pt"}, **one}, f32(1, 2)))
    put("safetensors", "ok-scalar", st({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, f32(3)))
    put("safetensors", "ok-zero-size", st({"z": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]}}))
    put("safetensors", "ok-two-tensors", st({
        "wte.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "transformer.h.0.ln_1.bias": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}},
        f32(1, 2, 3, 4, 5, 6)))
    put("safetensors", "ok-other-dtypes", st({
        "h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
        "b": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]},
        "u": {"dtype": "U8", "shape": [3], "data_offsets": [8, 11]}}, bytes(11)))
    put("safetensors", "ok-escaped-name", st({"a\\\"b\u00e9": one["a"]}, f32(1, 2)))
    put("safetensors", "bad-header-too-long", st(one, f32(1, 2), hlen=1 << 40))
    put("safetensors", "bad-header-len-1", st(b"{", pad=False))
    put("safetensors", "bad-truncated-data", st(one, f32(1)))
    put("safetensors", "bad-not-json", st(b"{not json}"))
    put("safetensors", "bad-not-object", st([1, 2]))
    put("safetensors", "bad-nul-in-header", st(b'{"a":1}\x00       '))
    put("safetensors", "bad-shape-mismatch", st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(1, 2)))
    put("safetensors", "bad-unknown-dtype", st({"a": {"dtype": "F31", "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)))
    put("safetensors", "bad-offsets-reversed", st({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, f32(1, 2)))
    put("safetensors", "bad-five-dims", st({"a": {"dtype": "F32", "shape": [1, 1, 1, 1, 1], "data_offsets": [0, 4]}}, f32(1)))
    put("safetensors", "bad-negative-dim", st({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, f32(1, 2)))
    put("safetensors", "bad-float-dim", st({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, f32(1, 2)))
    put("safetensors", "bad-no-offsets", st({"a": {"dtype": "F32", "shape": [2]}}, f32(1, 2)))
    put("safetensors", "bad-three-offsets", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, f32(1, 2)))
    # dimensions of 2^40 and 2^24 (each once allowed) whose product wraps 64 bits to 0 bytes
    put("safetensors", "bad-shape-product-wraps", st(b'{"a":{"dtype":"F32","shape":[1099511627776,16777216],"data_offsets":[0,0]}}'))
    put("safetensors", "bad-dim-over-64-bits", st(b'{"a":{"dtype":"F32","shape":[18446744073709551617],"data_offsets":[0,4]}}', f32(1)))
    put("safetensors", "bad-offset-over-64-bits", st(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551616,18446744073709551620]}}', f32(1)))
    put("safetensors", "bad-duplicate-name", st(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)))
    put("safetensors", "bad-two-metadata", st(b'{"__metadata__":{},"__metadata__":{}}'))
    put("safetensors", "bad-tiny-file", b"\x02\x00\x00")


# ---- JSON / meta.json
META = {"format": "ringpipe-checkpoint", "version": 1, "step": 2,
        "config": {"L": 2, "C": 32, "NH": 2, "T": 32, "V": 256, "Vp": 256},
        "loader": {"next_window": 2, "epoch": 0, "seed": 1337, "num_windows": 4216, "B": 2,
                   "T": 32, "file_order": 0},
        "sample_rng": [14319144588322987340, 2486963796494714088, 6987040053551828738, 1],
        "options": {"layers": 2, "channels": 32, "heads": 2, "seq": 32, "lr": 0.001,
                    "lr-schedule": "cosine", "file-order": False, "out": "runs/x",
                    "data": "builtin"}}


def meta(**change):
    m = json.loads(json.dumps(META))
    for path, v in change.items():
        keys = path.split("__")
        d = m
        for k in keys[:-1]:
            d = d[k]
        if v is None:
            del d[keys[-1]]
        else:
            d[keys[-1]] = v
    return json.dumps(m, separators=(",", ":"))


def jsons():
    put("json", "ok-meta", meta())
    put("json", "ok-meta-pretty", json.dumps(META, indent=2))
    put("json", "ok-no-config", '{"a":[1,2,{"b":null}],"c":"\\u00e9\\ud83d\\ude00"}')
    put("json", "ok-number-forms", '[0,-0,1.5e3,-2E-2,123456789012345678901234567890]')
    put("json", "ok-literals", '{"t":true,"f":false,"n":null}')
    put("json", "ok-nested", "[" * 100 + "]" * 100)
    put("json", "ok-step-zero", meta(step=0))
    put("json", "ok-step-int32-max", meta(step=2**31 - 1))
    put("json", "bad-nh-zero", meta(config__NH=0))
    put("json", "bad-heads-not-dividing", meta(config__NH=5))
    put("json", "bad-layers-zero", meta(config__L=0))
    put("json", "bad-vocab-huge", meta(config__V=2**40))
    put("json", "bad-vp-below-v", meta(config__Vp=100))
    put("json", "bad-config-float", meta(config__C=32.5))
    put("json", "bad-config-string", meta(config__T="32"))
    put("json", "bad-config-missing-key", meta(config__V=None))
    put("json", "bad-step-negative", meta(step=-5))
    put("json", "bad-step-huge", meta(step=2**40))
    put("json", "bad-step-over-64-bits", meta().replace('"step":2', '"step":99999999999999999999999'))
    put("json", "bad-nan", '{"loss":nan}')
    put("json", "bad-inf", '{"loss":Infinity}')
    put("json", "bad-trailing", '{"a":1} x')
    put("json", "bad-unterminated-string", '{"a":"b')
    put("json", "bad-bad-escape", '{"a":"\\x"}')
    put("json", "bad-short-unicode", '{"a":"\\u12"}')
    put("json", "bad-raw-control", '{"a":"\x01"}')
    put("json", "bad-too-deep", "[" * 200 + "]" * 200)
    put("json", "bad-leading-zero", "[01]")
    put("json", "bad-trailing-comma", "[1,]")
    put("json", "bad-empty", "")
    put("json", "bad-nul", '{"a":1}\x00')
    put("json", "bad-missing-colon", '{"a" 1}')


# ---- config files (train), and the same lines as flags
def configs():
    put("config", "ok-empty", "")
    put("config", "ok-model", "layers = 4\nchannels = 64\nheads = 4\nseq = 64\n")
    put("config", "ok-comments", "# a comment\n\nlayers 2   # trailing comment\n--steps=10\n")
    put("config", "ok-quoted", 'out = "runs/with # hash"\ndata = "builtin"\n')
    put("config", "ok-bool-forms", "quiet\nfile-order = yes\nmeasure-peak = off\n")
    put("config", "ok-underscores", "min_lr = 1e-5\nlr = 1e-3\nweight_decay = 0\n")
    put("config", "ok-pp-layers", "layers = 4\npp = 2\npp-layers = 3,1\n")
    put("config", "ok-crlf", "layers = 2\r\nsteps = 5\r\n")
    put("config", "bad-unterminated-quote", 'out = "abc\n')
    put("config", "bad-text-after-quote", 'out = "abc" def\n')
    put("config", "bad-lone-quote", 'out = "\n')
    put("config", "bad-unknown-key", "layer = 4\n")
    put("config", "bad-out-of-range", "layers = 0\n")
    put("config", "bad-int-overflow", "layers = 4294967297\n")
    put("config", "bad-int-junk", "layers = 4x\n")
    put("config", "bad-float-junk", "lr = 1e-3x\n")
    put("config", "bad-float-nan", "lr = nan\n")
    put("config", "bad-no-value", "layers\n")
    put("config", "bad-nested-config", "config = other.cfg\n")
    put("config", "bad-nul", "layers = 2\x00\n")
    put("config", "bad-heads-not-dividing", "channels = 32\nheads = 5\n")
    put("config", "bad-pp-layers-wraps", "layers = 2\npp = 2\npp-layers = 4294967297,1\n")
    put("config", "bad-pp-layers-trailing-comma", "layers = 2\npp = 2\npp-layers = 1,1,\n")
    put("config", "bad-pp-layers-sum", "layers = 4\npp = 2\npp-layers = 2,1\n")
    put("config", "bad-choice", "lr-schedule = linear\n")
    put("config", "bad-long-value", "out = " + "x" * 600 + "\n")


# ---- schedule CSVs
def schedules(ringpipe):
    put("schedule", "ok-one-rank", "0F0,0B0,0F1,0B1\n")
    put("schedule", "ok-gpipe-compute-only", "0F0,0F1,0B0,0B1\n0F0,0F1,0B0,0B1\n")
    put("schedule", "ok-1f1b-compute-only", "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n0F0,0B0,0F1,0B1,0F2,0B2,0F3,0B3\n")
    put("schedule", "ok-zb-split", "0F0,0I0,0W0\n")
    put("schedule", "ok-comments-blank-cells", "# a comment\n\n0F0, ,0B0\n")
    put("schedule", "ok-stage-indices", "0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n")
    put("schedule", "bad-empty", "")
    put("schedule", "bad-comments-only", "# nothing\n")
    put("schedule", "bad-huge-micro-batch", "0F99999999\n")
    put("schedule", "bad-huge-micro-batch-2", "0F0,0B0\n0F0,0B99999\n")
    put("schedule", "bad-huge-chunk", "999999999F0,0B0\n")
    put("schedule", "bad-int-max", "0F2147483647\n")
    # v x m = 2^32 wrapped the validator's int cell count (the UBSan report in schedule_sim.c)
    put("schedule", "bad-chunks-times-mbs-wraps-int", "32767F0,0B131071\n")
    put("schedule", "bad-ten-digits", "0F1234567890\n")
    put("schedule", "bad-missing-backward", "0F0,0F1,0B0\n")
    put("schedule", "bad-two-forwards", "0F0,0F0,0B0\n")
    put("schedule", "bad-backward-first", "0B0,0F0\n")
    put("schedule", "bad-w-before-i", "0F0,0W0,0I0\n")
    put("schedule", "bad-deadlock", "0F0,0B0,0F1,0B1\n0F1,0F0,0B0,0B1\n")
    put("schedule", "bad-unknown-op", "0X0\n")
    put("schedule", "bad-missing-mb", "0F\n")
    put("schedule", "bad-negative", "0F-1\n")
    put("schedule", "bad-nul", "0F0,0B0\x00\n")
    put("schedule", "bad-empty-row", "0F0,0B0\n ,\n")
    put("schedule", "bad-lowered-missing-send", "0F0,0RECV_B0,0B0\n0RECV_F0,0F0,0B0,0SEND_B0\n")
    if ringpipe:
        for name, p, m, v in (("1f1b", 2, 4, 1), ("gpipe", 3, 3, 1), ("naive", 2, 2, 1),
                              ("interleaved", 2, 4, 2), ("zb-h1", 2, 4, 1), ("1f1b", 4, 8, 1)):
            path = os.path.join(OUT, "schedule", "ok-lowered-%s-p%d-m%d" % (name, p, m))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            subprocess.run([ringpipe, "sim", "--schedule", name, "--pp", str(p),
                            "--microbatches", str(m), "--vpp", str(v), "--timeline=0",
                            "--csv", path], check=True, stdout=subprocess.DEVNULL)


def bpe_texts():
    put("bpe", "ok-english", "Hello world! It's a test: I'm sure you'll see they've said.")
    put("bpe", "ok-whitespace-runs", "a  b   c\t\t\n\n\n  \r\n \u3000\u00a0x   ")
    put("bpe", "ok-unicode", "naïve 日本語 Ελληνικά ٣٤٥ 😀👩‍👩‍👧 e\u0301")
    put("bpe", "ok-contractions", "'s't're've'm'll'd ''s DON'T o'clock 'x")
    put("bpe", "ok-invalid-utf8", b"a\xff\xfe b\xc3 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf")
    put("bpe", "ok-digits", "0 12 345 6789 1,000.5 -42 \u00b2\u2167")
    put("bpe", "ok-empty", "")
    put("bpe", "ok-long-letters", "x" * 3000)
    put("bpe", "ok-endoftext-spelling", "<|endoftext|>text<|endoftext|>")


def hf_configs():
    base = {"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "n_head": 2, "n_positions": 32,
            "vocab_size": 100, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True, "n_inner": None}
    def cfg(**kw):
        c = dict(base)
        for k, v in kw.items():
            if v is ...:
                c.pop(k)
            else:
                c[k] = v
        return json.dumps(c)
    put("hf_config", "ok-gpt2", cfg())
    put("hf_config", "ok-n-ctx-only", cfg(n_positions=..., n_ctx=32))
    put("hf_config", "ok-defaults", cfg(activation_function=..., layer_norm_epsilon=...,
                                        tie_word_embeddings=..., n_inner=...))
    put("hf_config", "bad-llama", cfg(model_type="llama"))
    put("hf_config", "bad-untied", cfg(tie_word_embeddings=False))
    put("hf_config", "bad-relu", cfg(activation_function="relu"))
    put("hf_config", "bad-heads-0", cfg(n_head=0))
    put("hf_config", "bad-heads-not-dividing", cfg(n_head=3))
    put("hf_config", "bad-huge-layers", cfg(n_layer=2 ** 40))
    put("hf_config", "bad-float-layers", cfg(n_layer=2.5))
    put("hf_config", "bad-n-inner", cfg(n_inner=10))
    put("hf_config", "bad-eps", cfg(layer_norm_epsilon=1e-6))
    put("hf_config", "bad-no-vocab", cfg(vocab_size=...))
    put("hf_config", "bad-not-json", '{"model_type": "gpt2",')
    put("hf_config", "bad-model-type-number", cfg(model_type=2))


if __name__ == "__main__":
    shards()
    doc_indexes()
    safetensors()
    jsons()
    configs()
    schedules(sys.argv[1] if len(sys.argv) > 1 else None)
    bpe_texts()
    hf_configs()
