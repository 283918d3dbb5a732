/* The rest of the FxMark microbenchmarks (clean-room, from their documented
 * semantics): block reads DRB*, append DWAL, truncate DWTL, sync write DWSL,
 * the shared path tree MRPM, directory enumeration MRD*, and the O_DIRECT
 * variants of DRBL/DRBM/DWOL/DWOM. Same layout conventions as fsbench.c:
 *   D/share/...    shared objects, created by the driver before forking
 *   D/w<i>/...     worker i's private objects, created by worker i after
 *                  pinning and before the start barrier
 * One iteration of a timed loop is one operation, counted with ls_count(). */
#include "fxmark2.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fsbench.h"

#define FILL_CHUNK (1 << 20)          /* pre-fill write size */
#define DRBM_STRIDE (8ull << 20)      /* DRBM: worker i reads at i * 8 MiB */
#define DWAL_CAP (64ull << 20)        /* DWAL: private file truncated at */
#define DWTL_MAX_BYTES (4ull << 30)   /* DWTL: pre-fill cap per worker */
#define DWTL_CALIBRATE_BLOCKS 4096
#define DWTL_CALIBRATE_ROUNDS 3
#define MRD_ENTRIES 1000              /* MRDL/MRDM: files per directory */
#define MRD_BUF (64 << 10)            /* getdents64 buffer */
#define MRPM_FANOUT 8                 /* MRPM: D/share/t/a/b/c/d/f<e> */
#define MRPM_DEPTH 5                  /* a..d directories, e file: 8^5 */
#define SPACE_SHARE 0.4               /* of the free space, for pre-fills */

/* ---------------------------------------------------------------- helpers */

static void fx_private_dir(struct ls_ctx *c)
{
	char p[PATH_MAX], failed[PATH_MAX];
	fs_wpath(c, p, "");
	if (ls_mkdir_p(p, 0755, failed, sizeof(failed)) != 0)
		ls_fail(c, "mkdir", failed, NULL, errno, NULL);
}

static void *fx_alloc(size_t len, int fill)
{
	void *b = aligned_alloc(IO_UNIT, len); /* O_DIRECT needs alignment */
	if (b)
		memset(b, fill, len);
	return b;
}

/* Write [off, off + len) of fd with data (1 MiB writes). *op names a failed
 * call. */
static int fx_fill(int fd, off_t off, uint64_t len, const char **op)
{
	static char *chunk;
	if (!chunk && !(chunk = fx_alloc(FILL_CHUNK, 'x'))) {
		*op = "malloc";
		errno = ENOMEM;
		return -1;
	}
	*op = "pwrite";
	while (len > 0) {
		size_t n = len < FILL_CHUNK ? (size_t)len : FILL_CHUNK;
		if (pwrite_full(fd, chunk, n, off) != 0)
			return -1;
		off += (off_t)n;
		len -= n;
	}
	return 0;
}

/* Create (truncate) path; write one 4 KiB block at each of the `n` offsets
 * i * stride; fsync (so O_DIRECT readers and journals start from a clean
 * file). 0 or -1 with *op and errno. */
static int fx_create_blocks(const char *path, int n, uint64_t stride,
			    const char **op)
{
	*op = "open";
	int fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	for (int i = 0; i < n; i++)
		if (fx_fill(fd, (off_t)(i * stride), IO_UNIT, op) != 0)
			goto fail;
	*op = "fsync";
	if (fsync(fd) != 0)
		goto fail;
	*op = "close";
	return close(fd);
fail:;
	int e = errno;
	close(fd);
	errno = e;
	return -1;
}

static int fx_sh_fail(struct ls_err *e, const char *op, const char *path)
{
	e->err = errno;
	snprintf(e->op, sizeof(e->op), "%s", op);
	snprintf(e->path, sizeof(e->path), "%s", path ? path : "");
	return -1;
}

/* D/share exists and D/share/file holds n blocks, block i at i * stride. */
static int fx_shared_file(const struct ls_run *r, struct ls_err *e, int n,
			  uint64_t stride)
{
	char p[PATH_MAX];
	const char *op;

	if (fs_share_dir_shared(r, e) != 0)
		return -1;
	if (ls_pathf(p, sizeof(p), "%s/share/file", r->dir) != 0)
		return fx_sh_fail(e, "path", r->dir);
	if (fx_create_blocks(p, n, stride, &op) != 0)
		return fx_sh_fail(e, op, p);
	return 0;
}

/* open() that explains a refused O_DIRECT. */
static int fx_open(struct ls_ctx *c, const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if ((flags & O_DIRECT) && e == EINVAL)
			ls_fail(c, "open", path, NULL, e,
				"Invalid argument: this file system refuses O_DIRECT");
		ls_fail(c, "open", path, NULL, e, NULL);
	}
	return fd;
}

static void fx_io_fail(struct ls_ctx *c, const char *op, ssize_t got,
		       int direct)
{
	int e = got < 0 ? errno : 0;
	if (direct && e == EINVAL)
		ls_fail(c, op, c->pa, NULL, e,
			"Invalid argument: this file system refuses O_DIRECT I/O");
	ls_fail(c, op, c->pa, NULL, e, got < 0 ? NULL : "short transfer");
}

static void fx_block(struct ls_ctx *c)
{
	c->buf = fx_alloc(IO_UNIT, 'a' + c->idx % 26);
	if (!c->buf)
		ls_fail(c, "malloc", NULL, NULL, ENOMEM, NULL);
}

/* D/w<i>/file with n blocks of IO_UNIT (created, or truncated to that),
 * opened with flags into c->fd; its path in c->pa. */
static void private_file(struct ls_ctx *c, int n, int flags)
{
	const char *op;
	fx_private_dir(c);
	fs_wpath(c, c->pa, "/file");
	if (fx_create_blocks(c->pa, n, 0, &op) != 0)
		ls_fail(c, op, c->pa, NULL, errno, NULL);
	c->fd = fx_open(c, c->pa, flags);
}

/* D/share/file (the driver created it), opened with flags, and the I/O
 * buffer. */
static void shared_file(struct ls_ctx *c, int flags)
{
	fs_spath(c, c->pa, "/file");
	c->fd = fx_open(c, c->pa, flags);
	fx_block(c);
}

/* Room for `share` of the free space of D split over the workers, in
 * bytes (UINT64_MAX if unknown). */
static uint64_t fx_space_budget(struct ls_ctx *c, double share)
{
	struct statvfs sv;
	if (statvfs(c->dir, &sv) != 0)
		ls_fail(c, "statvfs", c->dir, NULL, errno, NULL);
	if (sv.f_blocks == 0)
		return UINT64_MAX;
	double room = (double)sv.f_bavail * (double)sv.f_frsize * share /
		      c->nworkers;
	return room > 0 ? (uint64_t)room : 0;
}

/* -------------------------------------------------------- DRB* (+ O_DIRECT) */

static void drb_private(struct ls_ctx *c, int direct)
{
	private_file(c, 1, O_RDONLY | direct);
	fx_block(c);
}

void fx_drbl_setup(struct ls_ctx *c) { drb_private(c, 0); }
void fx_drbl_dio_setup(struct ls_ctx *c) { drb_private(c, O_DIRECT); }

int fx_drbm_shared(const struct ls_run *r, struct ls_err *e)
{
	return fx_shared_file(r, e, r->nworkers, DRBM_STRIDE);
}

int fx_drbh_shared(const struct ls_run *r, struct ls_err *e)
{
	return fx_shared_file(r, e, 1, 0);
}

static void drb_shared(struct ls_ctx *c, int direct)
{
	shared_file(c, O_RDONLY | direct);
}

void fx_drb_shared_setup(struct ls_ctx *c) { drb_shared(c, 0); }
void fx_drb_shared_dio_setup(struct ls_ctx *c) { drb_shared(c, O_DIRECT); }

static void drb_run(struct ls_ctx *c, off_t off, int direct)
{
	const int fd = c->fd;
	void *buf = c->buf;
	uint64_t n = 0;

	/* The block holds what set-up wrote (not a hole). */
	ssize_t r = pread(fd, buf, IO_UNIT, off);
	if (r != IO_UNIT)
		fx_io_fail(c, "pread", r, direct);
	if (((char *)buf)[0] != 'x' || ((char *)buf)[IO_UNIT - 1] != 'x')
		ls_fail(c, "pread", c->pa, NULL, 0, "block does not hold the "
			"pre-filled data");
	ls_op_start(c);

	while (!ls_stopped(c)) {
		r = pread(fd, buf, IO_UNIT, off);
		if (r != IO_UNIT)
			fx_io_fail(c, "pread", r, direct);
		ls_count(c, ++n);
	}
}

void fx_drbl_run(struct ls_ctx *c) { drb_run(c, 0, 0); }
void fx_drbl_dio_run(struct ls_ctx *c) { drb_run(c, 0, 1); }
void fx_drbm_run(struct ls_ctx *c)
{
	drb_run(c, (off_t)(c->idx * DRBM_STRIDE), 0);
}
void fx_drbm_dio_run(struct ls_ctx *c)
{
	drb_run(c, (off_t)(c->idx * DRBM_STRIDE), 1);
}

/* -------------------------------------------------- DWOL/DWOM with O_DIRECT */

void fx_dwol_dio_setup(struct ls_ctx *c)
{
	private_file(c, 1, O_RDWR | O_DIRECT);
	fx_block(c);
}

void fx_dwom_dio_setup(struct ls_ctx *c)
{
	shared_file(c, O_RDWR | O_DIRECT);
}

int fx_dwom_dio_shared(const struct ls_run *r, struct ls_err *e)
{
	return fx_shared_file(r, e, r->nworkers, IO_UNIT);
}

static void dwo_dio_run(struct ls_ctx *c, off_t off)
{
	const int fd = c->fd;
	const void *buf = c->buf;
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		ssize_t w = pwrite(fd, buf, IO_UNIT, off);
		if (w != IO_UNIT)
			fx_io_fail(c, "pwrite", w, 1);
		ls_count(c, ++n);
	}
}

void fx_dwol_dio_run(struct ls_ctx *c) { dwo_dio_run(c, 0); }
void fx_dwom_dio_run(struct ls_ctx *c)
{
	dwo_dio_run(c, (off_t)c->idx * IO_UNIT);
}

/* ------------------------------------------------------------------- DWAL */

/* D/w<i>/file, empty, opened O_APPEND. c->nfiles = the size cap. */
void fx_dwal_setup(struct ls_ctx *c)
{
	private_file(c, 0, O_WRONLY | O_APPEND);
	fx_block(c);
	uint64_t cap = DWAL_CAP, room = fx_space_budget(c, SPACE_SHARE);
	if (room < cap) {
		cap = room / IO_UNIT * IO_UNIT;
		if (cap < IO_UNIT)
			ls_fail(c, "statvfs", c->dir, NULL, ENOSPC,
				"no room for one 4 KiB block per worker");
		fprintf(stderr, LS_PROG ": warning: DWAL worker %d: file size "
			"capped at %llu bytes (free space)\n", c->idx,
			(unsigned long long)cap);
	}
	c->nfiles = cap;
}

/* One op = one 4 KiB append. When the file reaches the cap it is truncated
 * back to 0 (not counted; its time stays inside the window); ls_wstate.aux
 * counts these truncations. */
void fx_dwal_run(struct ls_ctx *c)
{
	const int fd = c->fd;
	const void *buf = c->buf;
	const uint64_t cap = c->nfiles;
	uint64_t n = 0, size = 0;

	while (!ls_stopped(c)) {
		if (size + IO_UNIT > cap) {
			if (ftruncate(fd, 0) != 0)
				ls_fail(c, "ftruncate", c->pa, NULL, errno, NULL);
			size = 0;
			c->ws->aux++;
			ls_op_start(c); /* the truncation is not in the next op's time */
		}
		ssize_t w = write(fd, buf, IO_UNIT);
		if (w != IO_UNIT)
			fx_io_fail(c, "write", w, 0);
		size += IO_UNIT;
		ls_count(c, ++n);
	}
}

/* ------------------------------------------------------------------- DWTL */

/* Truncate rate of a freshly filled file, one block at a time (best of a
 * few rounds, like MWUL's calibration). */
static double dwtl_calibrate(struct ls_ctx *c)
{
	const char *op;
	double rate = 0;
	for (int round = 0; round < DWTL_CALIBRATE_ROUNDS; round++) {
		off_t size = (off_t)DWTL_CALIBRATE_BLOCKS * IO_UNIT;
		if (ftruncate(c->fd, 0) != 0)
			ls_fail(c, "ftruncate", c->pa, NULL, errno, NULL);
		if (fx_fill(c->fd, 0, (uint64_t)size, &op) != 0)
			ls_fail(c, op, c->pa, NULL, errno, NULL);
		if (fsync(c->fd) != 0)
			ls_fail(c, "fsync", c->pa, NULL, errno, NULL);
		uint64_t t0 = ls_now_ns();
		while (size > 0) {
			size -= IO_UNIT;
			if (ftruncate(c->fd, size) != 0)
				ls_fail(c, "ftruncate", c->pa, NULL, errno, NULL);
		}
		uint64_t dt = ls_now_ns() - t0;
		double r = DWTL_CALIBRATE_BLOCKS / ls_ns_to_s(dt ? dt : 1);
		if (r > rate)
			rate = r;
	}
	return rate;
}

/* D/w<i>/file pre-filled with enough blocks for the run (precreated). */
void fx_dwtl_setup(struct ls_ctx *c)
{
	const char *op;
	private_file(c, 0, O_RDWR);

	/* Margin 3 (MWUL: 1.5): the calibration is short, and under load one
	 * worker's measured a quarter of what it then sustained. The pre-fill
	 * is capped by space anyway. */
	double rate = dwtl_calibrate(c);
	uint64_t blocks = fs_count_for(c, rate, 3.0, DWTL_MAX_BYTES / IO_UNIT,
				       fx_space_budget(c, SPACE_SHARE) / IO_UNIT,
				       "blocks");
	if (blocks == 0)
		ls_fail(c, "statvfs", c->dir, NULL, ENOSPC,
			"no room for one 4 KiB block per worker");
	if (fx_fill(c->fd, 0, blocks * IO_UNIT, &op) != 0) {
		if (errno != ENOSPC && errno != EDQUOT)
			ls_fail(c, op, c->pa, NULL, errno, NULL);
		struct stat st;
		if (fstat(c->fd, &st) != 0)
			ls_fail(c, "fstat", c->pa, NULL, errno, NULL);
		uint64_t got = (uint64_t)st.st_size / IO_UNIT;
		fprintf(stderr, LS_PROG ": warning: DWTL worker %d: file system "
			"full after %llu pre-filled blocks (wanted %llu); it may "
			"run out\n", c->idx, (unsigned long long)got,
			(unsigned long long)blocks);
		if (ftruncate(c->fd, (off_t)(got * IO_UNIT)) != 0)
			ls_fail(c, "ftruncate", c->pa, NULL, errno, NULL);
		blocks = got;
	}
	if (fsync(c->fd) != 0) /* blocks allocated, as in a long-lived file */
		ls_fail(c, "fsync", c->pa, NULL, errno, NULL);
	c->nfiles = blocks;
	c->ws->precreated = blocks;
}

/* One op = ftruncate to one block shorter; runs out at size 0. */
void fx_dwtl_run(struct ls_ctx *c)
{
	const int fd = c->fd;
	off_t size = (off_t)(c->nfiles * IO_UNIT);
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		if (size == 0) {
			ls_ran_out(c);
			return;
		}
		size -= IO_UNIT;
		if (ftruncate(fd, size) != 0)
			ls_fail(c, "ftruncate", c->pa, NULL, errno, NULL);
		ls_count(c, ++n);
	}
}

/* ------------------------------------------------------------------- DWSL */

void fx_dwsl_setup(struct ls_ctx *c)
{
	private_file(c, 1, O_RDWR);
	fx_block(c);
}

/* One op = pwrite 4 KiB at 0 + fsync. */
void fx_dwsl_run(struct ls_ctx *c)
{
	const int fd = c->fd;
	const void *buf = c->buf;
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		ssize_t w = pwrite(fd, buf, IO_UNIT, 0);
		if (w != IO_UNIT)
			fx_io_fail(c, "pwrite", w, 0);
		if (fsync(fd) != 0)
			ls_fail(c, "fsync", c->pa, NULL, errno, NULL);
		ls_count(c, ++n);
	}
}

/* ------------------------------------------------------------------- MRPM */

/* Tree D/share/t/<a>/<b>/<c>/<d>/f<e>, a..e in 0..7: 4,681 directories
 * (t included) and 32,768 empty files, every file five levels below
 * D/share/t. */
static int mrpm_tree(char *p, size_t len, size_t at, int level,
		     struct ls_err *e)
{
	if (at + 4 > len) {
		errno = ENAMETOOLONG;
		return fx_sh_fail(e, "path", p);
	}
	for (int k = 0; k < MRPM_FANOUT; k++) {
		if (level == MRPM_DEPTH - 1) {
			p[at] = '/';
			p[at + 1] = 'f';
			p[at + 2] = (char)('0' + k);
			p[at + 3] = '\0';
			int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
			if (fd < 0 || close(fd) != 0)
				return fx_sh_fail(e, "open", p);
			continue;
		}
		p[at] = '/';
		p[at + 1] = (char)('0' + k);
		p[at + 2] = '\0';
		if (ls_mkdir_ok(p, 0755) != 0)
			return fx_sh_fail(e, "mkdir", p);
		if (mrpm_tree(p, len, at + 2, level + 1, e) != 0)
			return -1;
	}
	return 0;
}

int fx_mrpm_shared(const struct ls_run *r, struct ls_err *e)
{
	char p[PATH_MAX], failed[PATH_MAX];
	/* the tree is rooted at D itself, as FxMark roots it at its mount
	 * point: every path is five components deep (D/a/b/c/d/fe) */
	if (ls_pathf(p, sizeof(p), "%s", r->dir) != 0)
		return fx_sh_fail(e, "path", r->dir);
	if (ls_mkdir_p(p, 0755, failed, sizeof(failed)) != 0)
		return fx_sh_fail(e, "mkdir", failed);
	return mrpm_tree(p, sizeof(p), strlen(p), 0, e);
}

/* c->pa = D/0/0/0/0/f0; c->num_at = offset of the first digit. */
void fx_mrpm_setup(struct ls_ctx *c)
{
	if (ls_pathf(c->pa, sizeof(c->pa), "%s/0/0/0/0/f0", c->dir) != 0)
		ls_fail(c, "path", c->dir, NULL, ENAMETOOLONG, NULL);
	c->num_at = strlen(c->pa) - 10;
	/* xorshift64 state, distinct per worker, never 0 */
	c->nfiles = 0x9E3779B97F4A7C15ull * (uint64_t)(c->idx + 1);
}

/* One op = open(O_RDONLY) + close of a pseudo-randomly chosen file. */
void fx_mrpm_run(struct ls_ctx *c)
{
	char *digit = c->pa + c->num_at; /* "a/b/c/d/fe" */
	uint64_t x = c->nfiles, n = 0;

	while (!ls_stopped(c)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t v = x >> 40;
		digit[0] = (char)('0' + (v & 7));
		digit[2] = (char)('0' + ((v >> 3) & 7));
		digit[4] = (char)('0' + ((v >> 6) & 7));
		digit[6] = (char)('0' + ((v >> 9) & 7));
		digit[9] = (char)('0' + ((v >> 12) & 7));
		fs_lookup_op(c, c->pa);
		ls_count(c, ++n);
	}
}

/* D and the first two levels of the tree (73 paths). */
void fx_mrpm_watch(const struct ls_run *r, struct ls_strlist *out)
{
	ls_strlist_addf(out, "%s", r->dir);
	for (int a = 0; a < MRPM_FANOUT; a++)
		ls_strlist_addf(out, "%s/%d", r->dir, a);
	for (int a = 0; a < MRPM_FANOUT; a++)
		for (int b = 0; b < MRPM_FANOUT; b++)
			ls_strlist_addf(out, "%s/%d/%d", r->dir, a, b);
}

/* ------------------------------------------------------------ MRDL / MRDM */

/* Fill directory `dir` with MRD_ENTRIES empty files e0..e999. */
static int mrd_fill(const char *dir, char *failed, size_t failed_sz)
{
	char p[PATH_MAX];
	for (int k = 0; k < MRD_ENTRIES; k++) {
		if (ls_pathf(p, sizeof(p), "%s/e%d", dir, k) != 0)
			goto fail;
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
		if (fd < 0 || close(fd) != 0)
			goto fail;
	}
	return 0;
fail:
	snprintf(failed, failed_sz, "%s", p);
	return -1;
}

void fx_mrdl_setup(struct ls_ctx *c)
{
	char failed[PATH_MAX];
	fx_private_dir(c);
	fs_wpath(c, c->pa, "");
	if (mrd_fill(c->pa, failed, sizeof(failed)) != 0)
		ls_fail(c, "open", failed, NULL, errno, NULL);
	c->fd = fx_open(c, c->pa, O_RDONLY | O_DIRECTORY);
	c->buf = fx_alloc(MRD_BUF, 0);
	if (!c->buf)
		ls_fail(c, "malloc", NULL, NULL, ENOMEM, NULL);
}

int fx_mrdm_shared(const struct ls_run *r, struct ls_err *e)
{
	char p[PATH_MAX], failed[PATH_MAX];
	if (fs_share_dir_shared(r, e) != 0)
		return -1;
	if (ls_pathf(p, sizeof(p), "%s/share", r->dir) != 0)
		return fx_sh_fail(e, "path", r->dir);
	if (mrd_fill(p, failed, sizeof(failed)) != 0)
		return fx_sh_fail(e, "open", failed);
	return 0;
}

void fx_mrdm_setup(struct ls_ctx *c)
{
	fs_spath(c, c->pa, "");
	c->fd = fx_open(c, c->pa, O_RDONLY | O_DIRECTORY);
	c->buf = fx_alloc(MRD_BUF, 0);
	if (!c->buf)
		ls_fail(c, "malloc", NULL, NULL, ENOMEM, NULL);
}

/* One op = getdents64 until it returns 0 (end of directory), then rewind
 * with lseek(0). Entries other than "." and ".." are counted; every
 * enumeration must see exactly MRD_ENTRIES (stored in ls_wstate.aux). */
void fx_mrd_run(struct ls_ctx *c)
{
	const int fd = c->fd;
	char *buf = c->buf;
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		uint64_t seen = 0;
		for (;;) {
			ssize_t got = getdents64(fd, buf, MRD_BUF);
			if (got < 0)
				ls_fail(c, "getdents64", c->pa, NULL, errno, NULL);
			if (got == 0)
				break;
			for (ssize_t off = 0; off < got;) {
				struct dirent64 *d = (struct dirent64 *)(buf + off);
				const char *s = d->d_name;
				if (!(s[0] == '.' && (s[1] == '\0' ||
						      (s[1] == '.' && s[2] == '\0'))))
					seen++;
				off += d->d_reclen;
			}
		}
		if (seen != MRD_ENTRIES) {
			char msg[96];
			snprintf(msg, sizeof(msg), "enumeration saw %llu entries, "
				 "expected %d", (unsigned long long)seen, MRD_ENTRIES);
			ls_fail(c, "getdents64", c->pa, NULL, 0, msg);
		}
		if (lseek(fd, 0, SEEK_SET) != 0)
			ls_fail(c, "lseek", c->pa, NULL, errno, NULL);
		if (n == 0)
			c->ws->aux = seen;
		ls_count(c, ++n);
	}
}
