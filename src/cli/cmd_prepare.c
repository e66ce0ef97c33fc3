/* ringpipe prepare */
#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_grid.h"

typedef struct {
  char text[RP_OPT_STRLEN], out[RP_OPT_STRLEN], doc_sep[RP_OPT_STRLEN];
  float val_fraction;
} prepare_opts;

static const rp_opt prepare_table[] = {
    {"text", RP_OPT_STR, offsetof(prepare_opts, text), "", 0, 0, NULL, "UTF-8 text file to tokenize"},
    {"out", RP_OPT_STR, offsetof(prepare_opts, out), "", 0, 0, NULL,
     "output directory for train.bin and val.bin (created if missing)"},
    {"val-fraction", RP_OPT_FLOAT, offsetof(prepare_opts, val_fraction), "0.1", 0, 0.99, NULL,
     "fraction of the text (its end) that goes to val.bin"},
    {"doc-sep", RP_OPT_STR, offsetof(prepare_opts, doc_sep), "", 0, 0, NULL,
     "document separator (\\n, \\t escapes): writes train.docs / val.docs, the document "
     "lengths that `train --pack` packs"},
};

int rp_cmd_prepare(int argc, char **argv) {
  prepare_opts o;
  int rc = rp_cli_parse("prepare", "ringpipe prepare --text FILE --out DIR [--val-fraction F] [--doc-sep SEP]",
                        "Tokenize text byte by byte (vocabulary 256) into llm.c-format shards.",
                        prepare_table, 4, &o, argc, argv);
  if (rc >= 0) return rc;
  if (!o.text[0] || !o.out[0])
    return rp_cli_fail("prepare", rp_err(RP_EINVAL, "--text FILE and --out DIR are both required"));
  if (rp_mpi_world_rank() != 0) return 0;
  rp_status s = rp_prepare_docs(o.text, o.out, o.val_fraction, o.doc_sep[0] ? o.doc_sep : NULL);
  if (s != RP_OK) return rp_cli_fail("prepare", s);
  printf("wrote %s/train.bin and %s/val.bin (byte-level tokens, vocab 256)\n", o.out, o.out);
  return 0;
}
