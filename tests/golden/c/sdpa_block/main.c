/* Example program: reads each input as raw little-endian binary, runs the model, writes each
 * output as raw binary. Usage: ./model IN_0.bin [...] OUT_0.bin [...]
 * (inputs then outputs, in the order of sdpa_block.h). The weights file, when the weights are not
 * compiled in: $MODEL_WEIGHTS, else ./model_weights.bin. */
#include <stdio.h>
#include <stdlib.h>
#include "sdpa_block.h"

static int read_file(const char *path, void *buf, size_t bytes)
{
  FILE *f = fopen(path, "rb");
  size_t got;
  if (!f) { fprintf(stderr, "cannot open %s\n", path); return -1; }
  got = fread(buf, 1, bytes, f);
  fclose(f);
  if (got != bytes) { fprintf(stderr, "%s: expected %lu bytes, got %lu\n", path, (unsigned long)bytes, (unsigned long)got); return -1; }
  return 0;
}

static int write_file(const char *path, const void *buf, size_t bytes)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, bytes, f) != bytes) { fprintf(stderr, "cannot write %s\n", path); if (f) fclose(f); return -1; }
  return fclose(f);
}

static float in_0[640];  /* input */
static float out_0[640];  /* output */

int main(int argc, char **argv)
{
  const void *inputs[1];
  void *outputs[1];
  int rc;
  if (argc != 1 + 1 + 1) {
    fprintf(stderr, "usage: %s input.bin output.bin\n", argv[0]);
    return 2;
  }
  rc = sdpa_block_init(getenv("MODEL_WEIGHTS"));
  if (rc != 0) { fprintf(stderr, "sdpa_block init failed (%d): is model_weights.bin here, or MODEL_WEIGHTS set?\n", rc); return 1; }
  if (read_file(argv[1], in_0, sizeof(in_0) * 640 / 640)) return 1;
  inputs[0] = in_0;
  outputs[0] = out_0;
  if (sdpa_block_run(inputs, outputs) != 0) return 1;
  if (write_file(argv[2], out_0, sizeof(out_0) * 640 / 640)) return 1;
  return 0;
}
