/* ringpipe prepare */
#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_util.h"

typedef struct {
  char text[RP_OPT_STRLEN], out[RP_OPT_STRLEN], tokenizer[RP_OPT_STRLEN];
  char doc_sep[RP_OPT_STRLEN];
  float val_fraction;
} prepare_opts;

static const rp_opt prepare_table[] = {
    {"text", RP_OPT_STR, offsetof(prepare_opts, text), "", 0, 0, NULL, "UTF-8 text file to tokenize"},
    {"out", RP_OPT_STR, offsetof(prepare_opts, out), "", 0, 0, NULL,
     "output directory for train.bin and val.bin (created if missing)"},
    {"val-fraction", RP_OPT_FLOAT, offsetof(prepare_opts, val_fraction), "0.1", 0, 0.99, NULL,
     "fraction of the text (its end) that goes to val.bin"},
    {"tokenizer", RP_OPT_STR, offsetof(prepare_opts, tokenizer), "", 0, 0, NULL,
     "llm.c's gpt2_tokenizer.bin: GPT-2 BPE tokens (vocab 50257) instead of bytes"},
    {"doc-sep", RP_OPT_STR, offsetof(prepare_opts, doc_sep), "", 0, 0, NULL,
     "document separator (\\n, \\t escapes): writes train.docs / val.docs, the document "
     "lengths that `train --pack` packs"},
};

int rp_cmd_prepare(int argc, char **argv) {
  prepare_opts o;
  int rc = rp_cli_parse("prepare",
                        "ringpipe prepare --text FILE --out DIR [--val-fraction F] [--tokenizer FILE] "
                        "[--doc-sep SEP]",
                        "Tokenize text into llm.c-format shards: byte by byte (vocabulary 256), or "
                        "with GPT-2's BPE given llm.c's gpt2_tokenizer.bin; with --doc-sep also the "
                        "document lengths that `train --pack` packs.",
                        prepare_table, sizeof prepare_table / sizeof *prepare_table, &o,
                        argc, argv);
  if (rc >= 0) return rc;
  if (!o.text[0] || !o.out[0])
    return rp_cli_fail("prepare", rp_err(RP_EINVAL, "--text FILE and --out DIR are both required"));
  if (rp_mpi_world_rank() != 0) return 0;
  if (!o.tokenizer[0]) {
    rp_status s = rp_prepare_docs(o.text, o.out, o.val_fraction, o.doc_sep[0] ? o.doc_sep : NULL);
    if (s != RP_OK) return rp_cli_fail("prepare", s);
    printf("wrote %s/train.bin and %s/val.bin (byte-level tokens, vocab 256)%s\n", o.out, o.out,
           o.doc_sep[0] ? " and their .docs document indexes" : "");
    return 0;
  }
  if (o.doc_sep[0]) {
    rp_err(RP_EINVAL, "--doc-sep writes document indexes for byte-level shards only; it cannot "
           "be combined with --tokenizer yet: drop one of them");
    return rp_cli_fail("prepare", RP_EINVAL);
  }
  rp_tokenizer *tk;
  rp_status s = rp_tokenizer_load_gpt2(&tk, o.tokenizer);
  if (s == RP_OK) {
    double t0 = rp_now();
    s = rp_prepare_bpe(o.text, o.out, o.val_fraction, tk);
    double dt = rp_now() - t0;
    if (s == RP_OK)
      printf("wrote %s/train.bin and %s/val.bin (GPT-2 BPE tokens, vocab %d) in %.2f s; train "
             "with --vocab %d\n", o.out, o.out, rp_tokenizer_vocab(tk), dt, rp_tokenizer_vocab(tk));
    rp_tokenizer_free(tk);
  }
  if (s != RP_OK) return rp_cli_fail("prepare", s);
  return 0;
}
