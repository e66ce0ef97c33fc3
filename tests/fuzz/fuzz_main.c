/* libFuzzer entry point for one target, chosen at compile time with
 * -DRP_FUZZ_TARGET=rp_fuzz_<name> (see meson.build). */
#include "fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  RP_FUZZ_TARGET(data, size);
  return 0;
}
