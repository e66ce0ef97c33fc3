/* Tokenizers: byte level and llm.c's GPT-2 table (decode, and byte-level BPE
 * encoding with the table's ids as merge ranks: bpe.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/bpe.h"
#include "io/io_fs.h"
#include "ringpipe/rp_data.h"

struct rp_tokenizer {
  int V, eot, can_encode;
  uint32_t *off;   /* V + 1 offsets into blob */
  char *blob;
  rp_bpe *bpe;     /* GPT-2 table that holds every byte: encodes */
};

rp_status rp_tokenizer_bytes(rp_tokenizer **out) {
  rp_tokenizer *tk = calloc(1, sizeof *tk);
  if (tk) {
    tk->off = malloc((RP_BYTE_VOCAB + 1) * sizeof *tk->off);
    tk->blob = malloc(RP_BYTE_VOCAB);
  }
  if (!tk || !tk->off || !tk->blob) {
    rp_tokenizer_free(tk);
    return rp_err(RP_ENOMEM, "out of memory");
  }
  tk->V = RP_BYTE_VOCAB;
  tk->eot = -1;
  tk->can_encode = 1;
  for (int i = 0; i <= RP_BYTE_VOCAB; i++) tk->off[i] = (uint32_t)i;
  for (int i = 0; i < RP_BYTE_VOCAB; i++) tk->blob[i] = (char)i;
  *out = tk;
  return RP_OK;
}

static uint32_t rd_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

rp_status rp_tokenizer_load_gpt2(rp_tokenizer **out, const char *path) {
  *out = NULL;
  char *raw;
  size_t n;
  RP_TRY(rp_io_read_text(path, &raw, &n));
  const unsigned char *d = (const unsigned char *)raw;
  rp_status s = RP_OK;
  rp_tokenizer *tk = NULL;
  uint32_t magic = n >= 1024 ? rd_u32(d) : 0, version = 0, V = 0;
  if (n < 1024) {
    s = rp_err(RP_EFORMAT, "'%s' is too small for a tokenizer file (%zu bytes; the header is "
               "1024)", path, n);
  } else if (magic != RP_TOKENIZER_MAGIC) {
    s = rp_err(RP_EFORMAT, "'%s' is not an llm.c tokenizer file: magic %u, expected %d", path,
               magic, RP_TOKENIZER_MAGIC);
  } else if ((version = rd_u32(d + 4)) != 1 && version != 2) {
    s = rp_err(RP_EFORMAT, "'%s' has tokenizer version %u; ringpipe reads versions 1 and 2",
               path, version);
  } else if ((V = rd_u32(d + 8)) == 0 || V > (1u << 24)) {
    s = rp_err(RP_EFORMAT, "'%s' declares a vocabulary of %u tokens; the header is corrupt",
               path, V);
  } else {
    tk = calloc(1, sizeof *tk);
    if (tk) {
      tk->off = malloc(((size_t)V + 1) * sizeof *tk->off);
      tk->blob = malloc(n - 1024 + 1);
    }
    if (!tk || !tk->off || !tk->blob) s = rp_err(RP_ENOMEM, "out of memory loading '%s'", path);
  }
  if (s == RP_OK) {
    tk->V = (int)V;
    /* version 1 is GPT-2's own table: <|endoftext|> is the last token */
    tk->eot = version == 2 ? (int)rd_u32(d + 12) : (int)V - 1;
    if (tk->eot >= (int)V || tk->eot < -1)
      s = rp_err(RP_EFORMAT, "'%s': end-of-text token %d is outside the vocabulary of %u", path,
                 tk->eot, V);
    size_t p = 1024, b = 0;
    for (uint32_t i = 0; s == RP_OK && i < V; i++) {
      if (p >= n) {
        s = rp_err(RP_EFORMAT, "'%s' is truncated: it ends at token %u of %u", path, i, V);
        break;
      }
      size_t len = d[p++];
      if (len == 0) {
        s = rp_err(RP_EFORMAT, "'%s': token %u has length 0; the file is corrupt", path, i);
      } else if (p + len > n) {
        s = rp_err(RP_EFORMAT, "'%s' is truncated inside token %u of %u", path, i, V);
      } else {
        tk->off[i] = (uint32_t)b;
        memcpy(tk->blob + b, d + p, len);
        b += len;
        p += len;
      }
    }
    if (s == RP_OK) tk->off[V] = (uint32_t)b;
  }
  if (s == RP_OK) {  /* a table without all 256 bytes (not GPT-2's) decodes only */
    s = rp_bpe_build(&tk->bpe, tk->blob, tk->off, tk->V, tk->eot);
    tk->can_encode = s == RP_OK;
    if (s == RP_EINVAL) s = RP_OK;
  }
  free(raw);
  if (s != RP_OK) {
    rp_tokenizer_free(tk);
    return s;
  }
  *out = tk;
  return RP_OK;
}

void rp_tokenizer_free(rp_tokenizer *tk) {
  if (!tk) return;
  rp_bpe_free(tk->bpe);
  free(tk->off);
  free(tk->blob);
  free(tk);
}

int rp_tokenizer_vocab(const rp_tokenizer *tk) { return tk->V; }
int rp_tokenizer_eot(const rp_tokenizer *tk) { return tk->eot; }
int rp_tokenizer_can_encode(const rp_tokenizer *tk) { return tk->can_encode; }

const char *rp_tokenizer_token(const rp_tokenizer *tk, int id, size_t *len) {
  if (id < 0 || id >= tk->V) {
    *len = 0;
    return NULL;
  }
  *len = tk->off[id + 1] - tk->off[id];
  return tk->blob + tk->off[id];
}

void rp_byte_encode(const char *text, size_t len, uint16_t *out) {
  for (size_t i = 0; i < len; i++) out[i] = (unsigned char)text[i];
}

rp_status rp_tokenizer_encode(const rp_tokenizer *tk, const char *text, size_t len, int32_t *out,
                              size_t cap, size_t *n) {
  *n = 0;
  if (!tk->can_encode)
    return rp_err(RP_EINVAL, "this tokenizer (vocabulary %d) can only decode: its table lacks "
                  "some single bytes, so BPE cannot encode every text; use GPT-2's "
                  "gpt2_tokenizer.bin", tk->V);
  if (tk->bpe) return rp_bpe_encode(tk->bpe, (const unsigned char *)text, len, out, cap, n);
  if (cap < len)
    return rp_err(RP_EINVAL, "text of %zu bytes needs %zu tokens; the buffer holds %zu", len, len,
                  cap);
  for (size_t i = 0; i < len; i++) out[i] = (unsigned char)text[i];
  *n = len;
  return RP_OK;
}

/* Length of the valid UTF-8 sequence at p (2..4), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  size_t k;
  uint32_t cp;
  if (p[0] >= 0xC2 && p[0] <= 0xDF) {
    k = 2;
    cp = p[0] & 0x1F;
  } else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
    k = 3;
    cp = p[0] & 0x0F;
  } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
    k = 4;
    cp = p[0] & 0x07;
  } else {
    return 0;
  }
  if (k > n) return 0;
  for (size_t i = 1; i < k; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3F);
  }
  if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;  /* overlong or surrogate */
  return k;
}

typedef struct {
  char *buf;
  size_t cap, len;
} sink;

static void put(sink *s, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++, s->len++)
    if (s->len + 1 < s->cap) s->buf[s->len] = p[i];
}

static void put_printable(sink *s, const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char c = b[i];
    size_t k = c >= 0x80 ? utf8_len(b + i, n - i) : 1;
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7F) || k > 1) {
      put(s, (const char *)b + i, k);
      i += k;
    } else {
      char e[8];
      snprintf(e, sizeof e, "\\x%02x", c);
      put(s, e, 4);
      i++;
    }
  }
}

static size_t sink_end(sink *s) {
  if (s->cap) s->buf[s->len < s->cap ? s->len : s->cap - 1] = '\0';
  return s->len;
}

size_t rp_bytes_printable(const unsigned char *bytes, size_t n, char *buf, size_t cap) {
  sink s = {buf, cap, 0};
  put_printable(&s, bytes, n);
  return sink_end(&s);
}

size_t rp_tokenizer_decode(const rp_tokenizer *tk, const int32_t *ids, size_t n, char *buf,
                           size_t cap) {
  sink s = {buf, cap, 0};
  /* Decode runs of known tokens together so that a UTF-8 character split
   * across tokens stays whole. */
  size_t i = 0;
  while (i < n) {
    size_t j = i, bytes = 0;
    while (j < n && ids[j] >= 0 && ids[j] < tk->V) {
      bytes += tk->off[ids[j] + 1] - tk->off[ids[j]];
      j++;
    }
    if (j > i) {
      unsigned char *tmp = malloc(bytes ? bytes : 1);
      if (!tmp) break;
      size_t o = 0;
      for (size_t q = i; q < j; q++) {
        size_t l;
        const char *t = rp_tokenizer_token(tk, ids[q], &l);
        memcpy(tmp + o, t, l);
        o += l;
      }
      put_printable(&s, tmp, bytes);
      free(tmp);
    }
    if (j < n) {
      char e[32];
      int l = snprintf(e, sizeof e, "<?%d>", (int)ids[j]);
      put(&s, e, (size_t)l);
      j++;
    }
    i = j;
  }
  return sink_end(&s);
}
