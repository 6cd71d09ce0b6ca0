/*
 * params.h — the built-in models' parameter helpers: declaring a model's
 * parameters from one table, and reshaping a seeded parameter for the fiber
 * models' demos (early_exit.c, parser.c: scale it and add uniform noise
 * from one splitmix64 stream, then tell the model its values changed).
 */
#ifndef SH_MODELS_PARAMS_H
#define SH_MODELS_PARAMS_H

#include <stdint.h>

#include "sheaf.h"

/* One parameter of a model's table: rank 1 reads d0 only. */
typedef struct sh_model_param_decl {
  const char *name;
  int rank;
  int64_t d0, d1;
  sheaf_init init;
  sheaf_param *out;
} sh_model_param_decl;

/* Declares each parameter of the table in order; the first failure is returned. */
static inline sheaf_status sh_params_declare(sheaf_model *m, const sh_model_param_decl *decl, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int64_t shape[2] = {decl[i].d0, decl[i].d1};
    sheaf_status st = sheaf_model_param(m, decl[i].name, decl[i].rank, shape, decl[i].init, decl[i].out);
    if (st != SHEAF_OK) return st;
  }
  return SHEAF_OK;
}

/* splitmix64 -> U[-1, 1) (24 random bits) */
static inline float sh_perturb_uniform(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 40) / (double)(1ull << 23) - 1.0);
}

/* q = q * scale + noise * U[-1, 1), drawing from *s. */
static inline sheaf_status sh_perturb(sheaf_model *m, sheaf_param q, float scale, float noise,
                                      uint64_t *s) {
  int rank;
  const int64_t *shape;
  float *v = sheaf_model_param_data(m, q, &rank, &shape);
  if (!v) return SHEAF_ERR_INVALID_ARG;
  int64_t n = rank == 2 ? shape[0] * shape[1] : shape[0];
  for (int64_t k = 0; k < n; k++) v[k] = v[k] * scale + noise * sh_perturb_uniform(s);
  return sheaf_model_param_update(m, q);
}

#endif
