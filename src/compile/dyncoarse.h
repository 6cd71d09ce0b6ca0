/*
 * dyncoarse.h — coarsening in the dynamic mode (docs/COMPILER.md,
 * "Coarsening in the dynamic mode"): each straight-line function of
 * vectors whose body has at least two tensor operations becomes one
 * generated kernel (translated by coarsen.c, printed by coarsen_emit.c
 * with a batch index the runtime fills with the instances' rows), handed
 * to lang as plain sh_lang_region descriptions (interp.h), which the host
 * program issues as one sheaf_kernel_call per call.
 *
 *   sh_dyncoarse *D;
 *   sh_dyncoarse_create(m, &bind, &D);   // compiles the regions' kernels
 *   sh_interp_set_regions(ip, sh_dyncoarse_n_regions(D), sh_dyncoarse_regions(D));
 *   sh_dyncoarse_report(D)               // which functions, and why the others stay separate
 *   sh_dyncoarse_free(D);                // after the interpreter
 */
#ifndef SH_COMPILE_DYNCOARSE_H
#define SH_COMPILE_DYNCOARSE_H

#include "lang/interp.h"

typedef struct sh_dyncoarse sh_dyncoarse;

/* m checked, bind its sizes and parameters (both must outlive D). A
 * function the translator refuses is no region (the report says why);
 * SHEAF_OK then. A kernel that does not compile is that error. */
sheaf_status sh_dyncoarse_create(const sh_module *m, const sh_lang_bind *bind, sh_dyncoarse **out);
int sh_dyncoarse_n_regions(const sh_dyncoarse *D);
const sh_lang_region *sh_dyncoarse_regions(const sh_dyncoarse *D);
/* One line per candidate function: "coarsening: node (f.sf:17): one kernel
 * of 9 ops" or "coarsening: step (f.sf:20) stays separate: REASON". */
const char *sh_dyncoarse_report(const sh_dyncoarse *D);
/* The regions' kernel sources (each preceded by a comment naming it). */
const char *sh_dyncoarse_source(const sh_dyncoarse *D);
void sh_dyncoarse_free(sh_dyncoarse *D); /* NULL is fine */

#endif
