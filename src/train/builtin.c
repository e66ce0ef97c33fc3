/* The built-in corpus: an excerpt of Shakespeare's plays (public domain)
 * compiled into the binary, turned into train/val shards on first use. */
#include <stdio.h>
#include <sys/stat.h>

#include "ringpipe/rp_data.h"
#include "train_internal.h"

extern const unsigned char rp_builtin_text[];
extern const size_t rp_builtin_text_len;

size_t rp_builtin_corpus(const unsigned char **data) {
  *data = rp_builtin_text;
  return rp_builtin_text_len;
}

rp_status rp_builtin_prepare(const char *dir) {
  char path[1024];
  struct stat st;
  char docs[1024];
  snprintf(path, sizeof path, "%s/val.bin", dir);
  snprintf(docs, sizeof docs, "%s/val.docs", dir);
  if (stat(path, &st) == 0 && stat(docs, &st) == 0) return RP_OK;  /* prepared by an earlier run */
  /* rp_prepare reads text from a file: write the corpus next to its shards. */
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/builtin.txt", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return rp_err(RP_EIO, "cannot write %s; pass a writable --out", path);
  size_t wrote = fwrite(rp_builtin_text, 1, rp_builtin_text_len, f);
  if (fclose(f) != 0 || wrote != rp_builtin_text_len)
    return rp_err(RP_EIO, "cannot write %s (disk full?)", path);
  /* paragraphs (blank-line separated) are the documents `--pack` packs */
  return rp_prepare_docs(path, dir, 0.1, "\\n\\n");
}
