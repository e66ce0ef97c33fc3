/* Build-time helper: turns a file into a C array so that the binary carries its
 * own default corpus (no data files or network needed for a first run).
 * usage: embed_file INPUT OUTPUT.c SYMBOL */
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: embed_file INPUT OUTPUT.c SYMBOL\n");
    return 2;
  }
  FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "w");
  if (!in || !out) {
    fprintf(stderr, "embed_file: cannot open %s or %s\n", argv[1], argv[2]);
    return 2;
  }
  fprintf(out, "/* generated from %s by tools/embed_file.c */\n#include <stddef.h>\n", argv[1]);
  fprintf(out, "const unsigned char %s[] = {", argv[3]);
  size_t n = 0;
  int c;
  while ((c = fgetc(in)) != EOF) fprintf(out, "%s%d,", n++ % 24 ? "" : "\n", c);
  fprintf(out, "0};\nconst size_t %s_len = %zu;\n", argv[3], n);
  fclose(in);
  return fclose(out) == 0 ? 0 : 1;
}
