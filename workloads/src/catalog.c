#include "catalog.h"

#include <strings.h>

#include "fsbench.h"
#include "mmbench.h"
#include "studybench.h"
#include "pthbench.h"

const struct workload ls_catalog[] = {
    {
        .name = "DWOL",
        .operation = "pwrite 4 KiB at offset 0 of a private file",
        .sharing = "none",
        .component = "data overwrite (private file)",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .worker_setup = fs_dwol_setup,
        .worker_run = fs_dwol_run,
        .watch_paths = fs_dwol_watch,
    },
    {
        .name = "DWOM",
        .operation = "pwrite 4 KiB at offset worker*4096 of one shared file",
        .sharing = "file",
        .component = "data overwrite, shared file (inode lock)",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .shared_setup = fs_dwom_shared,
        .worker_setup = fs_dwom_setup,
        .worker_run = fs_dwom_run,
        .watch_paths = fs_dwom_watch,
    },
    {
        .name = "MWCL",
        .operation = "create an empty file (open O_CREAT|O_EXCL + close) "
                     "in a private directory",
        .sharing = "none",
        .component = "inode allocation, private dir",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .worker_setup = fs_mwcl_setup,
        .worker_run = fs_create_run,
        .watch_paths = fs_private_dirs_watch,
    },
    {
        .name = "MWCM",
        .operation = "create an empty file (open O_CREAT|O_EXCL + close) "
                     "in one shared directory",
        .sharing = "dir",
        .component = "directory insert, shared dir",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .shared_setup = fs_share_dir_shared,
        .worker_setup = fs_mwcm_setup,
        .worker_run = fs_create_run,
        .watch_paths = fs_share_dir_watch,
    },
    {
        .name = "MWUL",
        .operation = "unlink a pre-created empty file in a private directory",
        .sharing = "none",
        .component = "inode deallocation, private dir",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .reports_precreated = true,
        .shared_setup = fs_mwul_shared,
        .worker_setup = fs_mwul_setup,
        .worker_run = fs_mwul_run,
        .watch_paths = fs_private_dirs_watch,
    },
    {
        .name = "MWRL",
        .operation = "rename a file within a private directory (a->b, b->a)",
        .sharing = "none",
        .component = "rename, private dir",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .worker_setup = fs_mwrl_setup,
        .worker_run = fs_rename_run,
        .watch_paths = fs_private_dirs_watch,
    },
    {
        .name = "MWRM",
        .operation = "rename a private file into one shared directory "
                     "and back",
        .sharing = "dir",
        .component = "rename across directories (shared dir)",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .shared_setup = fs_share_dir_shared,
        .worker_setup = fs_mwrm_setup,
        .worker_run = fs_rename_run,
        .watch_paths = fs_mwrm_watch,
    },
    {
        .name = "MRPL",
        .operation = "open(O_RDONLY) + close of a private file five "
                     "levels deep",
        .sharing = "none",
        .component = "path lookup (private path)",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .worker_setup = fs_mrpl_setup,
        .worker_run = fs_lookup_run,
        .watch_paths = fs_mrpl_watch,
    },
    {
        .name = "MRPH",
        .operation = "open(O_RDONLY) + close of one shared file five "
                     "levels deep",
        .sharing = "same file",
        .component = "path lookup (same dentries)",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .shared_setup = fs_mrph_shared,
        .worker_setup = fs_mrph_setup,
        .worker_run = fs_lookup_run,
        .watch_paths = fs_mrph_watch,
    },
    {
        .name = "mmap",
        .operation = "mmap 4 KiB anonymous private RW memory + munmap "
                     "(page not touched)",
        .sharing = "address space",
        .component = "memory map (mm->mmap_lock)",
        .model = LS_MODEL_THREAD,
        .needs_dir = false,
        .worker_run = mm_mmap_run,
    },
    {
        .name = "syncs",
        .operation = "append 1 KiB (param bytes) to a private file, then "
                     "fsync it (group commit)",
        .sharing = "journal",
        .component = "fsync / journal commit (many tasks)",
        .model = LS_MODEL_THREAD,
        .needs_dir = true,
        .shared_setup = st_syncs_shared,
        .worker_setup = st_syncs_setup,
        .worker_run = st_syncs_run,
        .watch_paths = st_syncs_watch,
        .op_names = st_syncs_ops,
        .params = st_syncs_params,
        .max_workers = 16384,
        .many_tasks = true,
    },
    {
        .name = "fsmark",
        .operation = "rounds over private files: create+write+close, stat, "
                     "open+read+close, unlink (params files, size_kib)",
        .sharing = "none",
        .component = "file life cycle, private dir (allocation, page cache)",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .worker_setup = st_fsmark_setup,
        .worker_run = st_fsmark_run,
        .watch_paths = st_private_watch,
        .op_names = st_fsmark_ops,
        .params = st_fsmark_params,
    },
    {
        .name = "varmail",
        .operation = "mail-server flow in one shared directory: delete, "
                     "create+append+fsync, append+fsync, read (params files, "
                     "iosize_kib)",
        .sharing = "dir",
        .component = "fsync of small files, shared dir (journal)",
        .model = LS_MODEL_THREAD,
        .needs_dir = true,
        .shared_setup = st_share_dir_shared,
        .worker_setup = st_varmail_setup,
        .worker_run = st_varmail_run,
        .watch_paths = st_share_watch,
        .op_names = st_varmail_ops,
        .params = st_varmail_params,
    },
    {
        .name = "mdtest_shared",
        .operation = "rounds of create (empty file), stat, remove of files "
                     "in one shared directory (param files)",
        .sharing = "dir",
        .component = "metadata: directory insert/lookup/remove, shared dir",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .shared_setup = st_share_dir_shared,
        .worker_setup = st_mdtest_shared_setup,
        .worker_run = st_mdtest_run,
        .watch_paths = st_share_watch,
        .op_names = st_mdtest_ops,
        .params = st_mdtest_params,
    },
    {
        .name = "mdtest_private",
        .operation = "rounds of create (empty file), stat, remove of files "
                     "in a private directory (param files)",
        .sharing = "none",
        .component = "metadata: inode allocation/lookup/free, private dir",
        .model = LS_MODEL_PROCESS,
        .needs_dir = true,
        .worker_setup = st_mdtest_private_setup,
        .worker_run = st_mdtest_run,
        .watch_paths = st_private_watch,
        .op_names = st_mdtest_ops,
        .params = st_mdtest_params,
    },
    {
        .name = "PMUTEX",
        .operation = "lock one global pthread mutex, 256 steps of arithmetic "
                     "on the data it guards, unlock (threads of one process)",
        .sharing = "user-space lock",
        .component = "application lock (a global pthread_mutex_t)",
        .model = LS_MODEL_THREAD,
        .needs_dir = false,
        .worker_run = pth_pmutex_run,
    },
    {
        .name = "PMUTEXL",
        .operation = "the same on a private pthread mutex and data per "
                     "thread (threads of one process)",
        .sharing = "none",
        .component = "application lock, private (scales)",
        .model = LS_MODEL_THREAD,
        .needs_dir = false,
        .worker_setup = pth_pmutexl_setup,
        .worker_run = pth_pmutexl_run,
    },
};

const size_t ls_catalog_len = sizeof(ls_catalog) / sizeof(ls_catalog[0]);

const struct workload *ls_catalog_find(const char *name)
{
    for (size_t i = 0; i < ls_catalog_len; i++)
        if (strcasecmp(ls_catalog[i].name, name) == 0)
            return &ls_catalog[i];
    return NULL;
}
