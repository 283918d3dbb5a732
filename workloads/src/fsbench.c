/* File-system microbenchmarks. Layout below --dir D:
 *   D/share/...    shared objects, created by the driver before forking
 *   D/w<i>/...     worker i's private objects, created by worker i after
 *                  pinning and before the start barrier
 * One iteration of a timed loop is one operation. */
#include "fsbench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* five path components below D, as FxMark's root/<id>/0/0/0/0:
 * D/w<i>/0/1/2/file (MRPL), D/share/0/1/2/file (MRPH) */
#define MRP_SUBPATH "0/1/2"

#define MWUL_CALIBRATE_FILES 2000
#define MWUL_CALIBRATE_ROUNDS 3
#define MWUL_MAX_FILES 2000000ull
#define MWUL_MARGIN 1.5
#define MWUL_EXTRA 1000

/* ---------------------------------------------------------------- helpers */

/* out = D/w<i><suffix> */
void fs_wpath(struct ls_ctx *c, char *out, const char *suffix)
{
	if (ls_pathf(out, PATH_MAX, "%s/w%d%s", c->dir, c->idx, suffix) != 0)
		ls_fail(c, "path", c->dir, NULL, errno, "path too long");
}

/* out = D/share<suffix> */
void fs_spath(struct ls_ctx *c, char *out, const char *suffix)
{
	if (ls_pathf(out, PATH_MAX, "%s/share%s", c->dir, suffix) != 0)
		ls_fail(c, "path", c->dir, NULL, errno, "path too long");
}

static void make_private_dir(struct ls_ctx *c, const char *suffix)
{
	char p[PATH_MAX], failed[PATH_MAX];
	fs_wpath(c, p, suffix);
	if (ls_mkdir_p(p, 0755, failed, sizeof(failed)) != 0)
		ls_fail(c, "mkdir", failed, NULL, errno, NULL);
}

/* pwrite all of buf (EINTR retried; a 0-byte write is ENOSPC); 0 or -1 */
int pwrite_full(int fd, const char *buf, size_t len, off_t off)
{
	while (len > 0) {
		ssize_t w = pwrite(fd, buf, len, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (w == 0) {
			errno = ENOSPC;
			return -1;
		}
		buf += w;
		len -= (size_t)w;
		off += w;
	}
	return 0;
}

/* Create (or truncate) path and fill it with `units` 4 KiB blocks. */
static int create_filled(const char *path, size_t units, const char **op)
{
	static char block[IO_UNIT];
	memset(block, 'x', sizeof(block));
	*op = "open";
	int fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	*op = "pwrite";
	for (size_t u = 0; u < units; u++) {
		if (pwrite_full(fd, block, IO_UNIT, (off_t)u * IO_UNIT) != 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
	}
	*op = "close";
	return close(fd);
}

static void worker_create_filled(struct ls_ctx *c, const char *path,
				 size_t units)
{
	const char *op;
	if (create_filled(path, units, &op) != 0)
		ls_fail(c, op, path, NULL, errno, NULL);
}

static void *alloc_block(struct ls_ctx *c)
{
	void *b = aligned_alloc(IO_UNIT, IO_UNIT);
	if (!b)
		ls_fail(c, "malloc", NULL, NULL, ENOMEM, NULL);
	memset(b, 'a' + c->idx % 26, IO_UNIT);
	return b;
}

static int open_rw(struct ls_ctx *c, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		ls_fail(c, "open", path, NULL, errno, NULL);
	return fd;
}

/* Decimal counter appended to c->pa, incremented in place (no printf in
 * the hot loop). num_start() appends "0". */
static void num_start(struct ls_ctx *c)
{
	size_t l = strlen(c->pa);
	if (l + 24 >= sizeof(c->pa))
		ls_fail(c, "path", c->pa, NULL, ENAMETOOLONG, "path too long");
	c->pa[l] = '0';
	c->pa[l + 1] = '\0';
	c->num_at = l;
	c->num_len = 1;
}

static inline void num_inc(struct ls_ctx *c)
{
	char *first = c->pa + c->num_at;
	char *p = first + c->num_len - 1;
	for (;;) {
		if (*p != '9') {
			(*p)++;
			return;
		}
		*p = '0';
		if (p == first)
			break;
		p--;
	}
	/* 99..9 -> 100..0 */
	first[0] = '1';
	first[c->num_len] = '0';
	c->num_len++;
	first[c->num_len] = '\0';
}

/* Driver side. */
static int sh_fail(struct ls_err *e, const char *op, const char *path)
{
	e->err = errno;
	snprintf(e->op, sizeof(e->op), "%s", op);
	snprintf(e->path, sizeof(e->path), "%s", path ? path : "");
	return -1;
}

static int sh_mkdir_p(const char *path, struct ls_err *e)
{
	char failed[PATH_MAX];
	if (ls_mkdir_p(path, 0755, failed, sizeof(failed)) != 0)
		return sh_fail(e, "mkdir", failed);
	return 0;
}

/* ------------------------------------------------------------------- DWOL */

void fs_dwol_setup(struct ls_ctx *c)
{
	make_private_dir(c, "");
	fs_wpath(c, c->pa, "/file");
	worker_create_filled(c, c->pa, 1);
	c->fd = open_rw(c, c->pa);
	c->buf = alloc_block(c);
}

void fs_dwol_run(struct ls_ctx *c)
{
	const int fd = c->fd;
	const void *buf = c->buf;
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		ssize_t w = pwrite(fd, buf, IO_UNIT, 0);
		if (w != IO_UNIT)
			ls_fail(c, "pwrite", c->pa, NULL, w < 0 ? errno : 0,
				w < 0 ? NULL : "short write");
		ls_count(c, ++n);
	}
}

/* D/w<i> and D/w<i>/file: every private-file workload (DWOL, DRBL, DWAL, ...) */
void fs_private_file_watch(const struct ls_run *r, struct ls_strlist *out)
{
	for (int i = 0; i < r->nworkers; i++) {
		ls_strlist_addf(out, "%s/w%d", r->dir, i);
		ls_strlist_addf(out, "%s/w%d/file", r->dir, i);
	}
}

/* ------------------------------------------------------------------- DWOM */

int fs_dwom_shared(const struct ls_run *r, struct ls_err *e)
{
	char p[PATH_MAX];
	const char *op;

	if (ls_pathf(p, sizeof(p), "%s/share", r->dir) != 0)
		return sh_fail(e, "path", r->dir);
	if (sh_mkdir_p(p, e) != 0)
		return -1;
	if (ls_pathf(p, sizeof(p), "%s/share/file", r->dir) != 0)
		return sh_fail(e, "path", r->dir);
	if (create_filled(p, (size_t)r->nworkers, &op) != 0)
		return sh_fail(e, op, p);
	return 0;
}

void fs_dwom_setup(struct ls_ctx *c)
{
	fs_spath(c, c->pa, "/file");
	c->fd = open_rw(c, c->pa);
	c->buf = alloc_block(c);
}

void fs_dwom_run(struct ls_ctx *c)
{
	const int fd = c->fd;
	const void *buf = c->buf;
	const off_t off = (off_t)c->idx * IO_UNIT;
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		ssize_t w = pwrite(fd, buf, IO_UNIT, off);
		if (w != IO_UNIT)
			ls_fail(c, "pwrite", c->pa, NULL, w < 0 ? errno : 0,
				w < 0 ? NULL : "short write");
		ls_count(c, ++n);
	}
}

/* D/share and D/share/file: every shared-file workload (DWOM, DRBM, DRBH, ...) */
void fs_shared_file_watch(const struct ls_run *r, struct ls_strlist *out)
{
	ls_strlist_addf(out, "%s/share", r->dir);
	ls_strlist_addf(out, "%s/share/file", r->dir);
}

/* ------------------------------------------------------------ MWCL / MWCM */

void fs_mwcl_setup(struct ls_ctx *c)
{
	make_private_dir(c, "");
	fs_wpath(c, c->pa, "/f"); /* D/w<i>/f<iter> */
	num_start(c);
}

int fs_share_dir_shared(const struct ls_run *r, struct ls_err *e)
{
	char p[PATH_MAX];
	if (ls_pathf(p, sizeof(p), "%s/share", r->dir) != 0)
		return sh_fail(e, "path", r->dir);
	return sh_mkdir_p(p, e);
}

void fs_mwcm_setup(struct ls_ctx *c)
{
	char suffix[32];
	snprintf(suffix, sizeof(suffix), "/f%d-", c->idx);
	fs_spath(c, c->pa, suffix); /* D/share/f<i>-<iter> */
	num_start(c);
}

void fs_create_run(struct ls_ctx *c)
{
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		int fd = open(c->pa, O_CREAT | O_RDWR | O_EXCL, 0600);
		if (fd < 0)
			ls_fail(c, "open", c->pa, NULL, errno, NULL);
		if (close(fd) != 0)
			ls_fail(c, "close", c->pa, NULL, errno, NULL);
		num_inc(c);
		ls_count(c, ++n);
	}
}

void fs_private_dirs_watch(const struct ls_run *r, struct ls_strlist *out)
{
	for (int i = 0; i < r->nworkers; i++)
		ls_strlist_addf(out, "%s/w%d", r->dir, i);
}

void fs_share_dir_watch(const struct ls_run *r, struct ls_strlist *out)
{
	ls_strlist_addf(out, "%s/share", r->dir);
}

/* ------------------------------------------------------------------- MWUL */

/* No shared objects; works out how many files one worker may pre-create
 * without exhausting the file system's inodes (tmpfs has a finite count). */
int fs_mwul_shared(const struct ls_run *r, struct ls_err *e)
{
	struct statvfs sv;

	r->shm->files_budget = UINT64_MAX;
	if (statvfs(r->dir, &sv) != 0)
		return sh_fail(e, "statvfs", r->dir);
	if (sv.f_files > 0) { /* 0: no inode limit reported */
		double avail = (double)sv.f_favail * 0.95 - 64.0 * r->nworkers;
		double per = avail / r->nworkers;
		r->shm->files_budget = per > 0 ? (uint64_t)per : 0;
	}
	return 0;
}

static void create_empty(struct ls_ctx *c)
{
	int fd = open(c->pa, O_CREAT | O_WRONLY | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		ls_fail(c, "open", c->pa, NULL, errno, NULL);
	if (close(fd) != 0)
		ls_fail(c, "close", c->pa, NULL, errno, NULL);
}

/* How many objects (files, blocks) to pre-create for a run at `rate`
 * ops/s: ceil(rate * (warmup + duration) * margin) + 1000, capped at `max`
 * and at `budget` (the file system's room per worker). A warning when a cap
 * leaves less than rate * (warmup + duration): the worker may run out. */
uint64_t fs_count_for(const struct ls_ctx *c, double rate, double margin,
		      uint64_t max, uint64_t budget, const char *unit)
{
	double need = rate * (c->warmup_s + c->duration_s);
	double want = need * margin;
	uint64_t target;
	if (want >= (double)max) {
		target = max;
	} else {
		target = (uint64_t)want; /* ceil() without libm */
		if ((double)target < want)
			target++;
		target += MWUL_EXTRA;
		if (target > max)
			target = max;
	}
	const char *why = target < budget ? "the workload's cap allows"
					  : "the file system has room for";
	if (target > budget)
		target = budget;
	if ((double)target < need)
		fprintf(stderr,
			LS_PROG ": warning: %s worker %d: %s only %llu %s per "
			"worker, %.0f are needed at the measured rate; it will "
			"run out\n",
			c->wl->name, c->idx, why, (unsigned long long)target, unit,
			need);
	return target;
}

/* MWUL/MWUM set-up: calibrate the unlink rate on files <calib><k>, then
 * pre-create <files>0 .. <files><n-1>; leaves c->pa = <files>0. */
static void precreate_for_unlink(struct ls_ctx *c, const char *calib,
				 const char *files)
{
	/* Calibrate: create a batch of files, then time unlinking them. A
	 * batch takes only milliseconds, so take the best of a few rounds
	 * (a single round easily under-estimates the sustained rate). */
	double rate = 0;
	for (int round = 0; round < MWUL_CALIBRATE_ROUNDS; round++) {
		snprintf(c->pa, sizeof(c->pa), "%s", calib);
		num_start(c);
		for (int k = 0; k < MWUL_CALIBRATE_FILES; k++, num_inc(c))
			create_empty(c);
		snprintf(c->pa, sizeof(c->pa), "%s", calib);
		num_start(c);
		uint64_t t0 = ls_now_ns();
		for (int k = 0; k < MWUL_CALIBRATE_FILES; k++, num_inc(c))
			if (unlink(c->pa) != 0)
				ls_fail(c, "unlink", c->pa, NULL, errno, NULL);
		uint64_t dt = ls_now_ns() - t0;
		double r = MWUL_CALIBRATE_FILES / ls_ns_to_s(dt ? dt : 1);
		if (r > rate)
			rate = r;
	}

	uint64_t target = fs_count_for(c, rate, MWUL_MARGIN, MWUL_MAX_FILES,
				       c->shm->files_budget, "files");

	/* Pre-create <files>0 .. <files><target-1>. */
	snprintf(c->pa, sizeof(c->pa), "%s", files);
	num_start(c);
	uint64_t k;
	for (k = 0; k < target; k++, num_inc(c)) {
		int fd = open(c->pa, O_CREAT | O_WRONLY | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			if ((errno == ENOSPC || errno == EDQUOT) && k > 0) {
				fprintf(stderr,
					LS_PROG ": warning: %s worker %d: file system "
					"full after %llu pre-created files (wanted %llu); "
					"it may run out\n",
					c->wl->name, c->idx, (unsigned long long)k,
					(unsigned long long)target);
				break;
			}
			ls_fail(c, "open", c->pa, NULL, errno, NULL);
		}
		if (close(fd) != 0)
			ls_fail(c, "close", c->pa, NULL, errno, NULL);
	}
	c->nfiles = k;
	c->ws->precreated = k;
	snprintf(c->pa, sizeof(c->pa), "%s", files);
	num_start(c);
}

void fs_mwul_setup(struct ls_ctx *c)
{
	char calib[PATH_MAX], files[PATH_MAX];

	make_private_dir(c, "");
	fs_wpath(c, calib, "/c");
	fs_wpath(c, files, "/f");
	precreate_for_unlink(c, calib, files);
}

void fs_mwul_run(struct ls_ctx *c)
{
	const uint64_t nfiles = c->nfiles;
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		if (n == nfiles) {
			ls_ran_out(c);
			return;
		}
		if (unlink(c->pa) != 0)
			ls_fail(c, "unlink", c->pa, NULL, errno, NULL);
		num_inc(c);
		ls_count(c, ++n);
	}
}

/* ------------------------------------------------------------ MWRL / MWRM */

void fs_mwrl_setup(struct ls_ctx *c)
{
	make_private_dir(c, "");
	fs_wpath(c, c->pa, "/a");
	fs_wpath(c, c->pb, "/b");
	worker_create_filled(c, c->pa, 0);
}

void fs_mwrm_setup(struct ls_ctx *c)
{
	char suffix[32];
	make_private_dir(c, "");
	fs_wpath(c, c->pa, "/f");
	snprintf(suffix, sizeof(suffix), "/f%d", c->idx);
	fs_spath(c, c->pb, suffix);
	worker_create_filled(c, c->pa, 0);
}

/* pa -> pb, pb -> pa, ...; each rename is one op. */
void fs_rename_run(struct ls_ctx *c)
{
	const char *a = c->pa, *b = c->pb;
	uint64_t n = 0;

	for (;;) {
		if (ls_stopped(c))
			return;
		if (rename(a, b) != 0)
			ls_fail(c, "rename", a, b, errno, NULL);
		ls_count(c, ++n);
		if (ls_stopped(c))
			return;
		if (rename(b, a) != 0)
			ls_fail(c, "rename", b, a, errno, NULL);
		ls_count(c, ++n);
	}
}

void fs_mwrm_watch(const struct ls_run *r, struct ls_strlist *out)
{
	fs_share_dir_watch(r, out);
	fs_private_dirs_watch(r, out);
}

/* ------------------------------------------------------------ MRPL / MRPH */

void fs_mrpl_setup(struct ls_ctx *c)
{
	make_private_dir(c, "/" MRP_SUBPATH);
	fs_wpath(c, c->pa, "/" MRP_SUBPATH "/file");
	worker_create_filled(c, c->pa, 0);
}

int fs_mrph_shared(const struct ls_run *r, struct ls_err *e)
{
	char p[PATH_MAX];
	const char *op;

	if (ls_pathf(p, sizeof(p), "%s/share/" MRP_SUBPATH, r->dir) != 0)
		return sh_fail(e, "path", r->dir);
	if (sh_mkdir_p(p, e) != 0)
		return -1;
	if (ls_pathf(p, sizeof(p), "%s/share/" MRP_SUBPATH "/file", r->dir) != 0)
		return sh_fail(e, "path", r->dir);
	if (create_filled(p, 0, &op) != 0)
		return sh_fail(e, op, p);
	return 0;
}

void fs_mrph_setup(struct ls_ctx *c)
{
	fs_spath(c, c->pa, "/" MRP_SUBPATH "/file");
}

const struct ls_param fs_lookup_params[] = {
	{ "stat", 0, 0, 1, "1: stat(2) the file, as FxMark's code does; 0: open+close it "
			   "(a lookup plus a file open and release)" },
	{ NULL, 0, 0, 0, NULL },
};

/* One lookup op of MRP*: open+close (param stat=0) or stat (stat=1). */
void fs_lookup_op(struct ls_ctx *c, const char *path)
{
	if (c->param[0]) {
		struct stat st;
		if (stat(path, &st) != 0)
			ls_fail(c, "stat", path, NULL, errno, NULL);
		return;
	}
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		ls_fail(c, "open", path, NULL, errno, NULL);
	if (close(fd) != 0)
		ls_fail(c, "close", path, NULL, errno, NULL);
}

void fs_lookup_run(struct ls_ctx *c)
{
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		fs_lookup_op(c, c->pa);
		ls_count(c, ++n);
	}
}

void fs_mrpl_watch(const struct ls_run *r, struct ls_strlist *out)
{
	for (int i = 0; i < r->nworkers; i++) {
		ls_strlist_addf(out, "%s/w%d", r->dir, i);
		ls_strlist_addf(out, "%s/w%d/" MRP_SUBPATH, r->dir, i);
		ls_strlist_addf(out, "%s/w%d/" MRP_SUBPATH "/file", r->dir, i);
	}
}

void fs_mrph_watch(const struct ls_run *r, struct ls_strlist *out)
{
	ls_strlist_addf(out, "%s/share", r->dir);
	ls_strlist_addf(out, "%s/share/" MRP_SUBPATH, r->dir);
	ls_strlist_addf(out, "%s/share/" MRP_SUBPATH "/file", r->dir);
}

/* ------------------------------------------------------------------- MWUM */

/* The shared directory, and MWUL's inode budget per worker. */
int fs_mwum_shared(const struct ls_run *r, struct ls_err *e)
{
	if (fs_share_dir_shared(r, e) != 0)
		return -1;
	return fs_mwul_shared(r, e);
}

/* Calibrates in a private directory (uncontended: an upper bound of the
 * rate in the shared one, so the pre-created count is on the safe side),
 * then pre-creates D/share/f<i>-<k>. The run loop is MWUL's. */
void fs_mwum_setup(struct ls_ctx *c)
{
	char calib[PATH_MAX], files[PATH_MAX], suffix[32];

	make_private_dir(c, "");
	fs_wpath(c, calib, "/c");
	snprintf(suffix, sizeof(suffix), "/f%d-", c->idx);
	fs_spath(c, files, suffix);
	precreate_for_unlink(c, calib, files);
}
