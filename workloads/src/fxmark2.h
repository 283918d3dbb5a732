/* The rest of the FxMark microbenchmarks (see fxmark2.c). */
#ifndef LS_FXMARK2_H
#define LS_FXMARK2_H

#include "catalog.h"

/* DRBL / DRBM / DRBH: pread 4 KiB of a private file / at a private 8 MiB
 * offset of one shared file / at 0 of one shared file; *_dio: O_DIRECT. */
void fx_drbl_setup(struct ls_ctx *c);
void fx_drbl_dio_setup(struct ls_ctx *c);
int fx_drbm_shared(const struct ls_run *r, struct ls_err *e);
int fx_drbh_shared(const struct ls_run *r, struct ls_err *e);
void fx_drb_shared_setup(struct ls_ctx *c);
void fx_drb_shared_dio_setup(struct ls_ctx *c);
void fx_drbl_run(struct ls_ctx *c);
void fx_drbl_dio_run(struct ls_ctx *c);
void fx_drbm_run(struct ls_ctx *c);
void fx_drbm_dio_run(struct ls_ctx *c);

/* DWOL_DIO / DWOM_DIO: DWOL / DWOM with O_DIRECT. */
void fx_dwol_dio_setup(struct ls_ctx *c);
void fx_dwol_dio_run(struct ls_ctx *c);
int fx_dwom_dio_shared(const struct ls_run *r, struct ls_err *e);
void fx_dwom_dio_setup(struct ls_ctx *c);
void fx_dwom_dio_run(struct ls_ctx *c);

/* DWAL: append 4 KiB to a private file (truncated to 0 at a cap). */
void fx_dwal_setup(struct ls_ctx *c);
void fx_dwal_run(struct ls_ctx *c);

/* DWTL: truncate a pre-filled private file one block shorter. */
void fx_dwtl_setup(struct ls_ctx *c);
void fx_dwtl_run(struct ls_ctx *c);

/* DWSL: pwrite 4 KiB at 0 + fsync of a private file. */
void fx_dwsl_setup(struct ls_ctx *c);
void fx_dwsl_run(struct ls_ctx *c);


/* MRPM: open+close of a pseudo-random file of a shared 8-ary tree. */
int fx_mrpm_shared(const struct ls_run *r, struct ls_err *e);
void fx_mrpm_setup(struct ls_ctx *c);
void fx_mrpm_run(struct ls_ctx *c);
void fx_mrpm_watch(const struct ls_run *r, struct ls_strlist *out);

/* MRDL / MRDM: enumerate a private / the shared directory. */
void fx_mrdl_setup(struct ls_ctx *c);
int fx_mrdm_shared(const struct ls_run *r, struct ls_err *e);
void fx_mrdm_setup(struct ls_ctx *c);
void fx_mrd_run(struct ls_ctx *c);

#endif
