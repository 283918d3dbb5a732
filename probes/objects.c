// SPDX-License-Identifier: MIT
/* Runs the object iterators, resolves each file's path while its descriptor
 * is open, and keeps one entry per inode / per process across snapshots. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "objects.h"

#define SET_SLOTS (1u << 17)   /* open addressing; twice the entries we keep */
#define MAX_ENTRIES (SET_SLOTS / 2)

struct file_entry {
	struct obj_file r;
	char path[512];
};

static struct file_entry *files;
static unsigned int nfiles;
static struct obj_task *tasks;
static unsigned int ntasks;
#define MAX_SBS 1024
static struct obj_sb sbs[MAX_SBS];   /* every mounted file system's superblock */
static unsigned int nsbs;
/* hash set of object keys: inode addresses (kernel pointers) for files and
 * cpu << 32 | pid (below 2^47) for threads, so the two never collide; 0 is
 * empty */
static uint64_t *seen;
static unsigned int dropped;    /* objects not kept: table full */
/* the time each snapshot (both iterators) took, in this window: at start,
 * every --interval while counting (loader.c on_tick), at stop */
#define MAX_WALKS 8
static uint64_t walk_ns[MAX_WALKS];
static unsigned int nwalks;

int objects_init(void)
{
	files = calloc(MAX_ENTRIES, sizeof(*files));
	tasks = calloc(MAX_ENTRIES, sizeof(*tasks));
	seen = calloc(SET_SLOTS, sizeof(*seen));
	if (!files || !tasks || !seen)
		return -ENOMEM;
	return 0;
}

void objects_reset(void)
{
	nfiles = ntasks = nsbs = dropped = nwalks = 0;
	memset(seen, 0, SET_SLOTS * sizeof(*seen));
}

static void keep_file(const struct obj_file *r)
{
	char link[64];
	struct file_entry *e;
	ssize_t n;

	/* one entry per inode, or per private object where files share an
	 * inode (the anonymous inode of every eventpoll, eventfd, ...); the
	 * loader's own files (its bpf maps and links) one per inode: only the
	 * paths it watches matter */
	uint64_t key = r->private_data && r->tgid != (__u32)getpid() ? r->private_data : r->inode;

	if (!u64_set_add(seen, SET_SLOTS, key))
		return;
	if (nfiles >= MAX_ENTRIES) {
		dropped++;
		return;
	}
	e = &files[nfiles++];
	e->r = *r;
	snprintf(link, sizeof(link), "/proc/%u/fd/%u", r->tgid, r->fd);
	n = readlink(link, e->path, sizeof(e->path) - 1);
	e->path[n > 0 ? n : 0] = '\0';
}

static void keep_task(const struct obj_task *r)
{
	/* one entry per thread and CPU it was seen on: threads share mm, files,
	 * fs and sighand, but each has its pi_lock, and each CPU its runqueue */
	if (!u64_set_add(seen, SET_SLOTS, ((uint64_t)r->cpu << 32) | r->pid))
		return;
	if (ntasks >= MAX_ENTRIES) {
		dropped++;
		return;
	}
	tasks[ntasks++] = *r;
}

static void keep_sb(const struct obj_sb *r)
{
	if (!u64_set_add(seen, SET_SLOTS, r->sb))
		return;
	if (nsbs >= MAX_SBS) {
		dropped++;
		return;
	}
	sbs[nsbs++] = *r;
}

static int run_iter(struct bpf_link *link, size_t rec_size, void (*keep)(const void *))
{
	static char buf[1 << 16];
	size_t have = 0;
	int fd = bpf_iter_create(bpf_link__fd(link));

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - have);
		size_t off = 0;

		if (n < 0) {
			/* EAGAIN: the kernel stopped a long walk without output; read on */
			if (errno == EINTR || errno == EAGAIN)
				continue;
			int err = -errno;
			close(fd);
			return err;
		}
		if (n == 0)
			break;
		have += (size_t)n;
		for (; have - off >= rec_size; off += rec_size)
			keep(buf + off);
		memmove(buf, buf + off, have - off);
		have -= off;
	}
	close(fd);
	return 0;
}

static void keep_file_cb(const void *p) { keep_file(p); }
static void keep_task_cb(const void *p) { keep_task(p); }
static void keep_sb_cb(const void *p) { keep_sb(p); }

int objects_snapshot(struct bpf_link *files_it, struct bpf_link *tasks_it, struct bpf_link *sbs_it)
{
	uint64_t t0 = now_ns();
	int err = run_iter(files_it, sizeof(struct obj_file), keep_file_cb);

	if (!err)
		err = run_iter(tasks_it, sizeof(struct obj_task), keep_task_cb);
	if (!err)
		err = run_iter(sbs_it, sizeof(struct obj_sb), keep_sb_cb);
	if (nwalks < MAX_WALKS)
		walk_ns[nwalks++] = now_ns() - t0;
	return err;
}

/* lock fields of a record (analyzer/kernel/lockfields.toml, via build/lockfields.h) */
struct lockfield_key {
	const char *key;
	size_t off;
};

#define FILE_KEY(k) { #k, offsetof(struct obj_file, k) },
#define TASK_KEY(k) { #k, offsetof(struct obj_task, k) },
static const struct lockfield_key file_keys[] = { LOCKFIELD_KEYS_FILE(FILE_KEY) };
static const struct lockfield_key task_keys[] = { LOCKFIELD_KEYS_TASK(TASK_KEY) };
#undef FILE_KEY
#undef TASK_KEY

/* the lock fields the iterator filled in (a field it did not reach is 0) */
static void lockfields_json(struct jw *w, const void *r, const struct lockfield_key *keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		__u64 v;

		memcpy(&v, (const char *)r + keys[i].off, sizeof(v));
		if (v)
			jw_khex(w, keys[i].key, v);
	}
}

/* the bound name of a unix socket: a path, "@name" for an abstract one
 * (a buffer of its own, written again at each call) */
static const char *unix_name(const struct obj_file *r)
{
	static char out[sizeof(r->unix_path) + 1];
	size_t n = r->unix_len > 2 ? r->unix_len - 2 : 0;   /* less sun_family */
	size_t j = 0;

	if (n > sizeof(r->unix_path))
		n = sizeof(r->unix_path);
	for (size_t i = 0; i < n && j + 1 < sizeof(out); i++) {
		char c = r->unix_path[i];

		if (i == 0 && c == '\0')
			c = '@';
		else if (c == '\0')
			break;
		else if (c < 0x20 || c > 0x7e)
			c = '?';
		out[j++] = c;
	}
	out[j] = '\0';
	return out;
}

void objects_json(struct jw *w)
{
	jw_key(w, "objects");
	jw_obj(w);
	jw_ku64(w, "dropped", dropped);
	jw_key(w, "walk_ns");
	jw_arr(w);
	for (unsigned int i = 0; i < nwalks; i++)
		jw_u64(w, walk_ns[i]);
	jw_arr_end(w);
	jw_key(w, "files");
	jw_arr(w);
	for (unsigned int i = 0; i < nfiles; i++)
		EMIT_ROW_OBJECTS_FILES(w, &files[i]);
	jw_arr_end(w);
	jw_key(w, "tasks");
	jw_arr(w);
	for (unsigned int i = 0; i < ntasks; i++)
		EMIT_ROW_OBJECTS_TASKS(w, &tasks[i]);
	jw_arr_end(w);
	jw_key(w, "superblocks");
	jw_arr(w);
	for (unsigned int i = 0; i < nsbs; i++)
		EMIT_ROW_OBJECTS_SUPERBLOCKS(w, &sbs[i]);
	jw_arr_end(w);
	jw_obj_end(w);
}
