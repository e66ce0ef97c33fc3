/* GPT-2's pre-tokenisation pattern, by hand (no regex library): the string is
 * cut into pieces that BPE then encodes one by one. */
#include "io/bpe.h"
#include "io/unicode_classes.h"

static int in_ranges(const rp_cp_range *r, int n, uint32_t cp) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < r[mid].lo)
      hi = mid - 1;
    else if (cp > r[mid].hi)
      lo = mid + 1;
    else
      return 1;
  }
  return 0;
}

int rp_uc_class(uint32_t cp) {
  if (cp < 0x80) {  /* ASCII: the common case, without a search */
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return RP_UC_LETTER;
    if (cp >= '0' && cp <= '9') return RP_UC_NUMBER;
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return RP_UC_SPACE;
    return RP_UC_OTHER;
  }
  if (in_ranges(rp_uc_letter, rp_uc_letter_n, cp)) return RP_UC_LETTER;
  if (in_ranges(rp_uc_number, rp_uc_number_n, cp)) return RP_UC_NUMBER;
  if (in_ranges(rp_uc_space, rp_uc_space_n, cp)) return RP_UC_SPACE;
  return RP_UC_OTHER;
}

/* Decodes the character at s[i]: its class, and *len its bytes (1 for a byte
 * that does not start a valid, shortest-form UTF-8 sequence). */
static int char_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
  unsigned char c = s[i];
  *len = 1;
  if (c < 0x80) return rp_uc_class(c);
  size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (!k || c > 0xF4 || i + k > n) return RP_UC_OTHER;
  uint32_t cp = c & (0x7F >> k);
  for (size_t j = 1; j < k; j++) {
    if ((s[i + j] & 0xC0) != 0x80) return RP_UC_OTHER;
    cp = cp << 6 | (s[i + j] & 0x3F);
  }
  if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return RP_UC_OTHER;
  *len = k;
  return rp_uc_class(cp);
}

/* 's 't 're 've 'm 'll 'd at i: the end of the match, or 0. */
static size_t contraction_end(const unsigned char *s, size_t n, size_t i) {
  if (s[i] != '\'' || i + 1 >= n) return 0;
  unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

/* End of the run of characters of class cls starting at i. */
static size_t run_end(const unsigned char *s, size_t n, size_t i, int cls) {
  size_t len;
  while (i < n && char_at(s, n, i, &len) == cls) i += len;
  return i;
}

size_t rp_gpt2_piece_end(const unsigned char *s, size_t n, size_t i) {
  size_t end = contraction_end(s, n, i), len;
  if (end) return end;
  /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a
   * run of one class, the class of the character after the space deciding */
  size_t k = i + (s[i] == ' ' && i + 1 < n);
  int cls = char_at(s, n, k, &len);
  if (cls != RP_UC_SPACE) return run_end(s, n, k, cls);
  /* `\s+(?!\S)` then `\s+`: a run of white space, less its last character when
   * a non-space follows (that character may start the next piece as ` ?X`) */
  size_t last = i, j = i;
  while (j < n && char_at(s, n, j, &len) == RP_UC_SPACE) last = j, j += len;
  if (j == n || last == i) return j;
  return last;
}
