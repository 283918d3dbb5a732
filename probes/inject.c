// SPDX-License-Identifier: MIT
/*
 * lockscope-inject: the loader of inject.bpf.c, driven by `lockscope
 * confirm` (lockscope/measure/inject.py). One command per line on stdin, one
 * JSON event per line on stdout:
 *
 *   track TGID                 delay only this process's tasks (several allowed)
 *   lock ADDR [mmap|file]      a kernel lock (hex address) to delay at its
 *                              contended acquisitions; mmap: an mm's
 *                              mmap_lock, at every acquisition (its own
 *                              tracepoints, attached then); file: the locks
 *                              of the file whose inode is at ADDR, at every
 *                              acquisition and release (filelock tracepoints)
 *   tick ADDR mutex|rwsem HZ   the one kernel mutex or rwsem delayed at timer
 *                              ticks (HZ per CPU) while its owner runs, and
 *                              the control while a tracked task runs without
 *                              holding it
 *   ulock PATH ACQUIRE RELEASE TGID ADDR GO
 *                              a user lock at ADDR in TGID, taken and released
 *                              by the functions at file offsets ACQUIRE and
 *                              RELEASE (hex) of PATH (GO 1: Go's register ABI);
 *                              the uprobes trap in process TGID only
 *   ulock_contended PATH ACQUIRE WAKE TGID ADDR
 *                              a user lock reached by its contended paths only:
 *                              the inside wait on return from its contended
 *                              acquire (file offset ACQUIRE), the outside one
 *                              on return from its wake-up of a waiter (WAKE)
 *   delay inside|outside NS    set a busy wait inside the critical sections or
 *                              just outside them (0: off), within the caps below
 *   read                       {"event":"counts", ...}: what was added so far
 *   quit                       detach and exit (also on EOF, SIGINT, SIGTERM)
 *
 * The programs are attached from the start with every delay 0; the BPF links
 * are the process's, so nothing stays injected once it exits, killed or not.
 */
#include <errno.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "jsonw.h"
#include "bpfutil.h"
#include "inject.h"
#include "inject.skel.h"

/* a kernel lock may be a spinlock held with interrupts off: 100 us at most
 * (perf lock contention -J allows 10 ms); a user lock's wait is preemptible */
#define MAX_KERNEL_NS 100000ULL
#define MAX_USER_NS 1000000ULL
#define MAX_UPROBES 16

static struct inject_bpf *skel;
static struct bpf_link *uprobes[MAX_UPROBES];
static struct { char path[4096]; unsigned long off; int pid; bool ret; } uprobe_at[MAX_UPROBES];
static int nr_uprobes;

static void emit(const char *event)
{
	struct jw out;

	jw_event_begin(&out, stdout, event);
	jw_event_end(&out);
}

static void emit_counts(void)
{
	int ncpus = libbpf_num_possible_cpus(), fd = bpf_map__fd(skel->maps.counts);
	static const char *names[INJ_NR] = { "inside", "inside_ns", "outside", "outside_ns" };
	struct timespec now;
	struct jw out;
	__u64 v[ncpus];

	clock_gettime(CLOCK_MONOTONIC, &now);
	jw_event_begin(&out, stdout, "counts");
	jw_ku64(&out, "t_ns", (__u64)now.tv_sec * 1000000000ULL + now.tv_nsec);
	for (__u32 k = 0; k < INJ_NR; k++) {
		__u64 sum = 0;

		if (bpf_map_lookup_elem(fd, &k, v) == 0)
			for (int c = 0; c < ncpus; c++)
				sum += v[c];
		jw_ku64(&out, names[k], sum);
	}
	jw_event_end(&out);
}

static struct bpf_link **tick_links;
static int nr_cpus;

/* inject_tick on every CPU's clock, hz times a second */
static int attach_tick(unsigned long hz)
{
	if (tick_links)
		return -EALREADY;
	nr_cpus = libbpf_num_possible_cpus();
	tick_links = calloc(nr_cpus, sizeof(*tick_links));
	if (!tick_links)
		return -ENOMEM;
	for (int cpu = 0; cpu < nr_cpus; cpu++) {
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE,
			.config = PERF_COUNT_SW_CPU_CLOCK,
			.size = sizeof(attr),
			.sample_freq = hz,
			.freq = 1,
		};
		int fd = (int)syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);

		if (fd < 0) {
			if (errno == ENODEV)
				continue;       /* possible but offline CPU */
			return -errno;
		}
		tick_links[cpu] = bpf_program__attach_perf_event(skel->progs.inject_tick, fd);
		if (!tick_links[cpu]) {
			int err = -errno;

			close(fd);
			return err;
		}
	}
	return 0;
}

static int put_value(struct bpf_map *map, const void *key, __u8 value)
{
	return bpf_map__update_elem(map, key, bpf_map__key_size(map), &value, sizeof(value), BPF_ANY) ? -errno : 0;
}

static int put(struct bpf_map *map, const void *key)
{
	return put_value(map, key, 1);
}

/* the filelock tracepoints, attached by the first `lock ADDR file` */
static int attach_file_locks(void)
{
	static struct bpf_link *posix, *flock;

	if (posix)
		return 0;
	if (!bpf_program__autoload(skel->progs.inject_posix_done))
		return -ENOENT;            /* this kernel has no filelock tracepoints */
	flock = bpf_program__attach(skel->progs.inject_flock_done);
	if (!flock)
		return -errno;
	posix = bpf_program__attach(skel->progs.inject_posix_done);
	if (!posix) {
		int err = -errno;

		bpf_link__destroy(flock);
		flock = NULL;
		return err;
	}
	return 0;
}

/* mmap_lock's own tracepoints, attached by the first `lock ADDR mmap` */
static int attach_mmap_lock(void)
{
	static struct bpf_link *in, *out;

	if (in)
		return 0;
	out = bpf_program__attach(skel->progs.inject_mmap_locking);
	if (!out)
		return -errno;
	in = bpf_program__attach(skel->progs.inject_mmap_locked);
	if (!in) {
		int err = -errno;

		bpf_link__destroy(out);
		out = NULL;
		return err;
	}
	return 0;
}

/* prog at file offset off of path in process pid (ret: on return), once */
static int attach_at(struct bpf_program *prog, const char *path, unsigned long off, int pid, bool ret)
{
	for (int i = 0; i < nr_uprobes; i++)
		if (uprobe_at[i].off == off && uprobe_at[i].pid == pid && uprobe_at[i].ret == ret &&
		    strcmp(uprobe_at[i].path, path) == 0)
			return 0;
	if (nr_uprobes == MAX_UPROBES)
		return -E2BIG;
	uprobes[nr_uprobes] = bpf_program__attach_uprobe(prog, ret, pid, path, off);
	if (!uprobes[nr_uprobes])
		return -errno;
	snprintf(uprobe_at[nr_uprobes].path, sizeof(uprobe_at[0].path), "%s", path);
	uprobe_at[nr_uprobes].pid = pid;
	uprobe_at[nr_uprobes].ret = ret;
	uprobe_at[nr_uprobes++].off = off;
	return 0;
}

static bool kernel_locks;     /* a `lock` command came: the kernel cap applies */

static int set_delay(const char *which, unsigned long long ns)
{
	if (ns > (kernel_locks ? MAX_KERNEL_NS : MAX_USER_NS))
		return -ERANGE;
	if (strcmp(which, "inside") == 0)
		skel->bss->inside_ns = ns;
	else if (strcmp(which, "outside") == 0)
		skel->bss->outside_ns = ns;
	else
		return -EINVAL;
	return 0;
}

/* one command line; 0, or a negative errno (and an error event) */
static int command(char *line)
{
	char verb[16], path[4096], which[16];
	unsigned long long a, b, c;
	unsigned int tgid, go;
	int err = 0;

	line[strcspn(line, "\n")] = '\0';
	if (sscanf(line, "%15s", verb) != 1)
		return 0;
	if (strcmp(verb, "track") == 0 && sscanf(line, "track %u", &tgid) == 1)
		err = put(skel->maps.tgids, &tgid);
	else if (strcmp(verb, "lock") == 0 && sscanf(line, "lock %llx", &a) == 1) {
		bool mmap = strstr(line, " mmap") != NULL, file = strstr(line, " file") != NULL;

		kernel_locks = true;
		err = mmap ? attach_mmap_lock() : file ? attach_file_locks() : 0;
		if (!err)
			err = put_value(skel->maps.locks, &a, mmap ? SITE_MMAP_LOCK : file ? SITE_FILE_LOCK : SITE_CONTENDED);
	} else if (strcmp(verb, "tick") == 0 && sscanf(line, "tick %llx %15s %llu", &a, which, &b) == 3 &&
		   (strcmp(which, "mutex") == 0 || strcmp(which, "rwsem") == 0) && b > 0 && b <= 20000) {
		kernel_locks = true;
		err = put_value(skel->maps.locks, &a, SITE_TICK);
		if (!err)
			err = attach_tick(b);
		if (!err) {
			skel->bss->tick_rwsem = strcmp(which, "rwsem") == 0;
			skel->bss->tick_lock = a;
		}
	} else if (strcmp(verb, "ulock") == 0 &&
		   sscanf(line, "ulock %4095s %llx %llx %u %llx %u", path, &a, &b, &tgid, &c, &go) == 6) {
		struct ulock_key k = { .addr = c, .tgid = tgid, .go = !!go };

		err = attach_at(skel->progs.inject_acquire, path, a, tgid, false);
		if (!err)
			err = attach_at(skel->progs.inject_release, path, b, tgid, false);
		if (!err)
			err = put(skel->maps.ulocks, &k);
	} else if (strcmp(verb, "ulock_contended") == 0 &&
		   sscanf(line, "ulock_contended %4095s %llx %llx %u %llx", path, &a, &b, &tgid, &c) == 5) {
		struct ulock_key k = { .addr = c, .tgid = tgid };

		err = attach_at(skel->progs.inject_contended_entry, path, a, tgid, false);
		if (!err)
			err = attach_at(skel->progs.inject_contended_return, path, a, tgid, true);
		if (!err)
			err = attach_at(skel->progs.inject_contended_entry, path, b, tgid, false);
		if (!err)
			err = attach_at(skel->progs.inject_wake_return, path, b, tgid, true);
		if (!err)
			err = put(skel->maps.ulocks, &k);
	} else if (strcmp(verb, "delay") == 0 && sscanf(line, "delay %15s %llu", which, &a) == 2)
		err = set_delay(which, a);
	else if (strcmp(verb, "read") == 0)
		emit_counts();
	else if (strcmp(verb, "quit") == 0)
		return 1;
	else
		err = -EINVAL;
	if (err)
		emit_error(verb, -err, "%s: failed (%s)", line, strerror(-err));
	else if (strcmp(verb, "read") != 0)
		emit("ok");
	fflush(stdout);
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	fclose(stdin);
}

int main(void)
{
	char *line = NULL;
	size_t cap = 0;
	int err;

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	skel = inject_bpf__open();
	if (!skel) {
		emit_error("load", errno, "loading the injection programs failed");
		return 1;
	}
	/* a kernel without the filelock tracepoints loads the rest (`lock ADDR file` then fails) */
	if (libbpf_find_vmlinux_btf_id("posix_lock_inode", BPF_TRACE_RAW_TP) < 0 ||
	    libbpf_find_vmlinux_btf_id("flock_lock_inode", BPF_TRACE_RAW_TP) < 0) {
		bpf_program__set_autoload(skel->progs.inject_posix_done, false);
		bpf_program__set_autoload(skel->progs.inject_flock_done, false);
	}
	err = inject_bpf__load(skel);
	if (err) {
		emit_error("load", -err, "loading the injection programs failed");
		inject_bpf__destroy(skel);
		return 1;
	}
	/* the uprobes have no target of their own: attached per ulock command;
	 * mmap_lock's tracepoints by the first `lock ADDR mmap` */
	bpf_program__set_autoattach(skel->progs.inject_acquire, false);
	bpf_program__set_autoattach(skel->progs.inject_release, false);
	bpf_program__set_autoattach(skel->progs.inject_mmap_locked, false);
	bpf_program__set_autoattach(skel->progs.inject_mmap_locking, false);
	bpf_program__set_autoattach(skel->progs.inject_posix_done, false);
	bpf_program__set_autoattach(skel->progs.inject_flock_done, false);
	bpf_program__set_autoattach(skel->progs.inject_tick, false);
	bpf_program__set_autoattach(skel->progs.inject_contended_entry, false);
	bpf_program__set_autoattach(skel->progs.inject_contended_return, false);
	bpf_program__set_autoattach(skel->progs.inject_wake_return, false);
	err = inject_bpf__attach(skel);
	if (err) {
		emit_error("attach", -err, "attaching the injection programs failed");
		inject_bpf__destroy(skel);
		return 1;
	}
	emit("ready");
	fflush(stdout);
	while (getline(&line, &cap, stdin) > 0)
		if (command(line))
			break;
	for (int i = 0; i < nr_uprobes; i++)
		bpf_link__destroy(uprobes[i]);
	for (int cpu = 0; tick_links && cpu < nr_cpus; cpu++)
		bpf_link__destroy(tick_links[cpu]);
	free(tick_links);
	inject_bpf__destroy(skel);
	free(line);
	return 0;
}
