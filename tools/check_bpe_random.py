#!/usr/bin/env python3
"""Differential check of ringpipe's GPT-2 BPE against tiktoken on seeded random
text (characters drawn from many Unicode classes: letters of several scripts,
digits and other numbers, white space of every kind, punctuation, symbols,
combining marks, emoji, apostrophes for the contractions), through the real
`ringpipe prepare --tokenizer`. Needs tiktoken and GPT-2's vocabulary files:

    V/bin/python tools/check_bpe_random.py build/ringpipe DATA_DIR [ROUNDS]

DATA_DIR: encoder.json + vocab.bpe (see tools/make_gpt2_token_fixture.py)."""
import os, random, struct, subprocess, sys, tempfile

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

POOL = (list("abcXYZ019 '''\t\n\r\x0b\x0c.,;:!?-_()[]{}<>@#$%^&*+=/\\|~`\"")
        + list("éüßñçØÆŁЖжщΩλμאבغيकखஅ日本語中文한국ไทย々〆ー")
        + ["\u00a0", "\u2003", "\u3000", "\u2028", "\u0085", "\u180e", "\u200b", "\ufeff"]
        + list("٣٤٥४२௫¹²½Ⅻ⅓𝟙") + ["\u0301", "\u0308", "\u094d", "\u20dd"]
        + list("😀🎉👍🏽❤✔€£©™→∑√≠…–—’‘“”") + ["\u200d", "\ufe0f"] + ["'s", "'ll", "'re", " '"])


def read_shard(p):
    raw = open(p, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    return list(struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n]))


def main():
    rp, data = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    enc = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str,
                            mergeable_ranks=data_gym_to_mergeable_bpe_ranks(
                                os.path.join(data, "vocab.bpe"), os.path.join(data, "encoder.json")),
                            special_tokens={"<|endoftext|>": 50256})
    tok = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                       "gpt2_tokens", "gpt2_tokenizer.bin")
    rng = random.Random(7)
    total = 0
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            text = "".join(rng.choice(POOL) for _ in range(rng.randint(2000, 20000)))
            path = os.path.join(d, "t.txt")
            open(path, "w", encoding="utf-8", newline="").write(text)
            subprocess.run([rp, "prepare", "--text", path, "--out", d + "/o", "--tokenizer", tok,
                            "--val-fraction", "0"], check=True, capture_output=True)
            got = read_shard(d + "/o/train.bin")[1:]
            want = enc.encode_ordinary(text)
            if got != want:
                i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                ctx = enc.decode(want[max(0, i - 3):i + 3])
                sys.exit(f"round {r}: first difference at id {i}: ringpipe {got[i:i+4]} tiktoken "
                         f"{want[i:i+4]} near {ctx!r}")
            total += len(text.encode())
    print(f"{rounds} random texts, {total} bytes: ringpipe's ids equal tiktoken's")


if __name__ == "__main__":
    main()
