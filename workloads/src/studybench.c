/* Study workloads (see studybench.h). Layout below --dir D: D/share/ holds
 * shared directories (driver-created), D/w<i>/ worker i's private ones.
 * Every operation is timed on its own: ls_op_start() before an op whose
 * path had to be built first, ls_op(c, TYPE) after each op. */
#include "studybench.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KIB 1024ll

/* ---------------------------------------------------------------- helpers */

static int full_io(int fd, char *buf, size_t len, bool wr)
{
	while (len > 0) {
		ssize_t n = wr ? write(fd, buf, len) : read(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0) {
			if (!wr)
				return 0; /* EOF */
			errno = ENOSPC;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void write_all(struct ls_ctx *c, int fd, const char *path, size_t len)
{
	if (full_io(fd, c->buf, len, true) != 0)
		ls_fail(c, "write", path, NULL, errno, NULL);
}

/* Read until EOF (buffer of cap bytes reused). */
static void read_to_eof(struct ls_ctx *c, int fd, const char *path,
			size_t cap)
{
	for (;;) {
		ssize_t n = read(fd, c->buf, cap);
		if (n == 0)
			return;
		if (n < 0 && errno != EINTR)
			ls_fail(c, "read", path, NULL, errno, NULL);
	}
}

static void xclose(struct ls_ctx *c, int fd, const char *path)
{
	if (close(fd) != 0)
		ls_fail(c, "close", path, NULL, errno, NULL);
}

static int xopen(struct ls_ctx *c, const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0600);
	if (fd < 0)
		ls_fail(c, "open", path, NULL, errno, NULL);
	return fd;
}

static void alloc_buf(struct ls_ctx *c, size_t len)
{
	c->buf = malloc(len ? len : 1);
	if (!c->buf)
		ls_fail(c, "malloc", NULL, NULL, ENOMEM, NULL);
	memset(c->buf, 'a' + c->idx % 26, len);
}

/* c->pa = D/<fmt...>; c->num_at = its length (names are appended there). */
__attribute__((format(printf, 2, 3)))
static void base_path(struct ls_ctx *c, const char *fmt, ...)
{
	char rel[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	if (ls_pathf(c->pa, sizeof(c->pa), "%s/%s", c->dir, rel) != 0)
		ls_fail(c, "path", c->dir, NULL, errno, "path too long");
	c->num_at = strlen(c->pa);
}

/* c->pa = base + decimal k (no printf: this runs between timed ops). */
static const char *name_k(struct ls_ctx *c, uint64_t k)
{
	char tmp[24];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + k % 10);
		k /= 10;
	} while (k);
	char *p = c->pa + c->num_at;
	while (n)
		*p++ = tmp[--n];
	*p = '\0';
	return c->pa;
}

static void mkdir_private(struct ls_ctx *c)
{
	char p[PATH_MAX], failed[PATH_MAX];
	if (ls_pathf(p, sizeof(p), "%s/w%d", c->dir, c->idx) != 0)
		ls_fail(c, "path", c->dir, NULL, errno, "path too long");
	if (ls_mkdir_p(p, 0755, failed, sizeof(failed)) != 0)
		ls_fail(c, "mkdir", failed, NULL, errno, NULL);
}

int st_share_dir_shared(const struct ls_run *r, struct ls_err *e)
{
	char p[PATH_MAX], failed[PATH_MAX];
	if (ls_pathf(p, sizeof(p), "%s/share", r->dir) != 0 ||
	    ls_mkdir_p(p, 0755, failed, sizeof(failed)) != 0) {
		e->err = errno;
		snprintf(e->op, sizeof(e->op), "mkdir");
		snprintf(e->path, sizeof(e->path), "%s", p);
		return -1;
	}
	return 0;
}

void st_share_watch(const struct ls_run *r, struct ls_strlist *out)
{
	ls_strlist_addf(out, "%s/share", r->dir);
}

void st_private_watch(const struct ls_run *r, struct ls_strlist *out)
{
	for (int i = 0; i < r->nworkers; i++)
		ls_strlist_addf(out, "%s/w%d", r->dir, i);
}

/* ------------------------------------------------------------------ syncs */

enum { SY_APPEND, SY_FSYNC };
const char *const st_syncs_ops[] = { "append", "fsync", NULL };
const struct ls_param st_syncs_params[] = {
	{ "bytes", 1024, 1, 1 << 20, "bytes appended before each fsync" },
	{ NULL, 0, 0, 0, NULL },
};

int st_syncs_shared(const struct ls_run *r, struct ls_err *e)
{
	return st_share_dir_shared(r, e);
}

void st_syncs_setup(struct ls_ctx *c)
{
	base_path(c, "share/s%d", c->idx);
	c->fd = xopen(c, c->pa, O_CREAT | O_WRONLY | O_APPEND | O_TRUNC);
	alloc_buf(c, (size_t)c->param[0]);
}

void st_syncs_run(struct ls_ctx *c)
{
	const size_t len = (size_t)c->param[0];
	while (!ls_stopped(c)) {
		write_all(c, c->fd, c->pa, len);
		ls_op_part(c, SY_APPEND); /* one op = one append + fsync */
		if (fsync(c->fd) != 0)
			ls_fail(c, "fsync", c->pa, NULL, errno, NULL);
		ls_op(c, SY_FSYNC);
	}
}

void st_syncs_watch(const struct ls_run *r, struct ls_strlist *out)
{
	st_share_watch(r, out);
}

/* ----------------------------------------------------------------- fsmark */

enum { FM_CREATE, FM_WRITE, FM_CLOSE, FM_STAT, FM_OPEN, FM_READ, FM_UNLINK };
const char *const st_fsmark_ops[] = { "create", "write", "close", "stat",
				      "open", "read", "unlink", NULL };
const struct ls_param st_fsmark_params[] = {
	{ "files", 128, 1, 1000000, "files per worker (per round)" },
	{ "size_kib", 512, 0, 1 << 20, "size of each file in KiB" },
	{ NULL, 0, 0, 0, NULL },
};

void st_fsmark_setup(struct ls_ctx *c)
{
	mkdir_private(c);
	base_path(c, "w%d/f", c->idx);
	alloc_buf(c, (size_t)(c->param[1] * KIB));
}

/* stat each of the worker's nf files, one op of type `type` each; false
 * once the stop flag is seen. */
static bool stat_each(struct ls_ctx *c, uint64_t nf, int type)
{
	struct stat st;

	for (uint64_t k = 0; k < nf; k++) {
		if (ls_stopped(c))
			return false;
		const char *p = name_k(c, k);
		ls_op_start(c);
		if (stat(p, &st) != 0)
			ls_fail(c, "stat", p, NULL, errno, NULL);
		ls_op(c, type);
	}
	return true;
}

/* unlink each of the worker's nf files, as stat_each. */
static bool unlink_each(struct ls_ctx *c, uint64_t nf, int type)
{
	for (uint64_t k = 0; k < nf; k++) {
		if (ls_stopped(c))
			return false;
		const char *p = name_k(c, k);
		ls_op_start(c);
		if (unlink(p) != 0)
			ls_fail(c, "unlink", p, NULL, errno, NULL);
		ls_op(c, type);
	}
	return true;
}

/* Rounds over the worker's files: create+write+close each, stat each,
 * open+read+close each, unlink each. */
void st_fsmark_run(struct ls_ctx *c)
{
	const uint64_t nf = (uint64_t)c->param[0];
	const size_t len = (size_t)(c->param[1] * KIB);

	for (;;) {
		for (uint64_t k = 0; k < nf; k++) {
			if (ls_stopped(c))
				return;
			const char *p = name_k(c, k);
			ls_op_start(c);
			int fd = xopen(c, p, O_CREAT | O_EXCL | O_WRONLY);
			ls_op(c, FM_CREATE);
			write_all(c, fd, p, len);
			ls_op(c, FM_WRITE);
			xclose(c, fd, p);
			ls_op(c, FM_CLOSE);
		}
		if (!stat_each(c, nf, FM_STAT))
			return;
		for (uint64_t k = 0; k < nf; k++) {
			if (ls_stopped(c))
				return;
			const char *p = name_k(c, k);
			ls_op_start(c);
			int fd = xopen(c, p, O_RDONLY);
			ls_op(c, FM_OPEN);
			read_to_eof(c, fd, p, len ? len : 1);
			ls_op(c, FM_READ);
			xclose(c, fd, p);
			ls_op(c, FM_CLOSE);
		}
		if (!unlink_each(c, nf, FM_UNLINK))
			return;
	}
}

/* ---------------------------------------------------------------- varmail */

enum { VM_DELETE, VM_CREATE, VM_APPEND, VM_FSYNC, VM_CLOSE, VM_OPEN,
       VM_READ };
const char *const st_varmail_ops[] = { "delete", "create", "append", "fsync",
				       "close", "open", "read", NULL };
const struct ls_param st_varmail_params[] = {
	{ "files", 100, 1, 1000000, "files per worker in the shared directory" },
	{ "iosize_kib", 16, 1, 1 << 16, "KiB written per create/append" },
	{ NULL, 0, 0, 0, NULL },
};

void st_varmail_setup(struct ls_ctx *c)
{
	const uint64_t nf = (uint64_t)c->param[0];
	const size_t len = (size_t)(c->param[1] * KIB);

	base_path(c, "share/m%d-", c->idx);
	alloc_buf(c, 2 * len); /* a file holds at most 2 I/Os */
	for (uint64_t k = 0; k < nf; k++) {
		const char *p = name_k(c, k);
		int fd = xopen(c, p, O_CREAT | O_TRUNC | O_WRONLY);
		write_all(c, fd, p, len);
		xclose(c, fd, p);
	}
}

/* varmail's append, fsync, close of an open file: one op each. */
static void append_sync_close(struct ls_ctx *c, int fd, const char *p,
			      size_t len)
{
	write_all(c, fd, p, len);
	ls_op(c, VM_APPEND);
	if (fsync(fd) != 0)
		ls_fail(c, "fsync", p, NULL, errno, NULL);
	ls_op(c, VM_FSYNC);
	xclose(c, fd, p);
	ls_op(c, VM_CLOSE);
}

/* One iteration on file k (and j, half the set away), as filebench's
 * varmail flow: delete k; create k, append, fsync, close; open j, append,
 * fsync, close; open j, read it whole, close. */
void st_varmail_run(struct ls_ctx *c)
{
	const uint64_t nf = (uint64_t)c->param[0];
	const size_t len = (size_t)(c->param[1] * KIB);

	for (uint64_t i = 0;; i++) {
		uint64_t k = i % nf, j = (k + nf / 2) % nf;
		if (ls_stopped(c))
			return;
		const char *p = name_k(c, k);
		ls_op_start(c);
		if (unlink(p) != 0)
			ls_fail(c, "unlink", p, NULL, errno, NULL);
		ls_op(c, VM_DELETE);
		int fd = xopen(c, p, O_CREAT | O_EXCL | O_WRONLY | O_APPEND);
		ls_op(c, VM_CREATE);
		append_sync_close(c, fd, p, len);

		if (ls_stopped(c))
			return;
		p = name_k(c, j);
		ls_op_start(c);
		fd = xopen(c, p, O_WRONLY | O_APPEND);
		ls_op(c, VM_OPEN);
		append_sync_close(c, fd, p, len);
		fd = xopen(c, p, O_RDONLY);
		ls_op(c, VM_OPEN);
		read_to_eof(c, fd, p, 2 * len);
		ls_op(c, VM_READ);
		xclose(c, fd, p);
		ls_op(c, VM_CLOSE);
		/* j now holds 2 I/Os; it is deleted when it becomes k again */
	}
}

/* ----------------------------------------------------------------- mdtest */

enum { MD_CREATE, MD_STAT, MD_REMOVE };
const char *const st_mdtest_ops[] = { "create", "stat", "remove", NULL };
const struct ls_param st_mdtest_params[] = {
	{ "files", 1000, 1, 10000000, "files per worker per phase" },
	{ NULL, 0, 0, 0, NULL },
};

void st_mdtest_shared_setup(struct ls_ctx *c)
{
	base_path(c, "share/f%d-", c->idx);
}

void st_mdtest_private_setup(struct ls_ctx *c)
{
	mkdir_private(c);
	base_path(c, "w%d/f", c->idx);
}

/* Rounds of three phases over the worker's files: create (empty file:
 * open O_CREAT|O_EXCL + close) each, stat each, remove each. */
void st_mdtest_run(struct ls_ctx *c)
{
	const uint64_t nf = (uint64_t)c->param[0];

	for (;;) {
		for (uint64_t k = 0; k < nf; k++) {
			if (ls_stopped(c))
				return;
			const char *p = name_k(c, k);
			ls_op_start(c);
			int fd = xopen(c, p, O_CREAT | O_EXCL | O_WRONLY);
			xclose(c, fd, p);
			ls_op(c, MD_CREATE);
		}
		if (!stat_each(c, nf, MD_STAT))
			return;
		if (!unlink_each(c, nf, MD_REMOVE))
			return;
	}
}
