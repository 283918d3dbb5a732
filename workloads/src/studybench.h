/* Workloads from file-system scalability studies other than FxMark:
 * syncs (Tux3 fsync report), fsmark (FORTH study), varmail (filebench,
 * ScaleXFS / F2FS fsync study), mdtest (shared and private directories).
 * Each times several operation types (catalog op_names, ls_op types). */
#ifndef LS_STUDYBENCH_H
#define LS_STUDYBENCH_H

#include "catalog.h"

extern const char *const st_syncs_ops[];
extern const struct ls_param st_syncs_params[];
int st_syncs_shared(const struct ls_run *r, struct ls_err *e);
void st_syncs_setup(struct ls_ctx *c);
void st_syncs_run(struct ls_ctx *c);
void st_syncs_watch(const struct ls_run *r, struct ls_strlist *out);

extern const char *const st_fsmark_ops[];
extern const struct ls_param st_fsmark_params[];
void st_fsmark_setup(struct ls_ctx *c);
void st_fsmark_run(struct ls_ctx *c);

extern const char *const st_varmail_ops[];
extern const struct ls_param st_varmail_params[];
int st_share_dir_shared(const struct ls_run *r, struct ls_err *e);
void st_varmail_setup(struct ls_ctx *c);
void st_varmail_run(struct ls_ctx *c);
void st_share_watch(const struct ls_run *r, struct ls_strlist *out);

extern const char *const st_mdtest_ops[];
extern const struct ls_param st_mdtest_params[];
void st_mdtest_shared_setup(struct ls_ctx *c);
void st_mdtest_private_setup(struct ls_ctx *c);
void st_mdtest_run(struct ls_ctx *c);
void st_private_watch(const struct ls_run *r, struct ls_strlist *out);

#endif
