/* File-system microbenchmarks (FxMark-style semantics, 4 KiB I/O unit). */
#ifndef LS_FSBENCH_H
#define LS_FSBENCH_H

#include "catalog.h"

/* the block of every data workload: one page (FxMark's 4 KiB) */
#define IO_UNIT 4096

/* out = D/w<i><suffix>, out = D/share<suffix> (PATH_MAX; fail if longer) */
void fs_wpath(struct ls_ctx *c, char *out, const char *suffix);
void fs_spath(struct ls_ctx *c, char *out, const char *suffix);

/* DWOL: pwrite 4 KiB at offset 0 of a private file. */
void fs_dwol_setup(struct ls_ctx *c);
void fs_dwol_run(struct ls_ctx *c);
void fs_private_file_watch(const struct ls_run *r, struct ls_strlist *out);

/* DWOM: pwrite 4 KiB at offset i*4096 of one shared file. */
int fs_dwom_shared(const struct ls_run *r, struct ls_err *e);
void fs_dwom_setup(struct ls_ctx *c);
void fs_dwom_run(struct ls_ctx *c);
void fs_shared_file_watch(const struct ls_run *r, struct ls_strlist *out);

/* MWCL / MWCM: create empty files in a private / the shared dir. */
void fs_mwcl_setup(struct ls_ctx *c);
int fs_share_dir_shared(const struct ls_run *r, struct ls_err *e);
void fs_mwcm_setup(struct ls_ctx *c);
void fs_create_run(struct ls_ctx *c);
void fs_private_dirs_watch(const struct ls_run *r, struct ls_strlist *out);
void fs_share_dir_watch(const struct ls_run *r, struct ls_strlist *out);

/* MWUL: unlink pre-created files in a private dir. */
int fs_mwul_shared(const struct ls_run *r, struct ls_err *e);
void fs_mwul_setup(struct ls_ctx *c);
void fs_mwul_run(struct ls_ctx *c);
/* Pre-create count for a run at `rate` ops/s (MWUL, MWUM, DWTL). */
uint64_t fs_count_for(const struct ls_ctx *c, double rate, double margin,
		      uint64_t max, uint64_t budget, const char *unit);

/* MWRL / MWRM: rename ping-pong within a private dir / via the shared dir. */
void fs_mwrl_setup(struct ls_ctx *c);
void fs_mwrm_setup(struct ls_ctx *c);
void fs_rename_run(struct ls_ctx *c);
void fs_mwrm_watch(const struct ls_run *r, struct ls_strlist *out);

/* MRPL / MRPH: open(O_RDONLY)+close of a file five levels deep. */
void fs_mrpl_setup(struct ls_ctx *c);
int fs_mrph_shared(const struct ls_run *r, struct ls_err *e);
void fs_mrph_setup(struct ls_ctx *c);
void fs_lookup_run(struct ls_ctx *c);
void fs_lookup_op(struct ls_ctx *c, const char *path);
int pwrite_full(int fd, const char *buf, size_t len, off_t off);
extern const struct ls_param fs_lookup_params[];
void fs_mrpl_watch(const struct ls_run *r, struct ls_strlist *out);
void fs_mrph_watch(const struct ls_run *r, struct ls_strlist *out);

/* MWUM: unlink pre-created files in the shared dir (run: fs_mwul_run). */
int fs_mwum_shared(const struct ls_run *r, struct ls_err *e);
void fs_mwum_setup(struct ls_ctx *c);

#endif
