// SPDX-License-Identifier: MIT
/*
 * The command protocol of lockscope-probe: one command per line on stdin,
 * one JSON event per line on stdout (lockscope/measure/probe.py speaks it).
 *
 *   track PID      add a process (and, by fork-following, its children)
 *   untrack PID    remove a process (children already forked stay tracked)
 *   watch PATH     hold an O_PATH descriptor so the path's locks can be named
 *   usdt start|done COOKIE PROVIDER|- NAME PATH
 *                  time application lock waits between two USDT probes, or
 *                  (provider -) the entries of two exported functions (usdt.c)
 *   usdt return COOKIE - NAME PATH
 *                  ... or to the return of the start function
 *   usdt suffix ENTRY I TEXT
 *                  a name suffix of an entry whose waits are filtered by name
 *   start          clear the aggregates and start counting
 *   stop           stop counting; emit the "data" event
 *   reset          forget every tracked process (and the children they
 *                  forked) and watched path, for the next measurement of a
 *                  sweep in the same loaded probe (a watched path would keep
 *                  the last one's file system mounted)
 *   quit           detach everything and exit (also on EOF, SIGINT, SIGTERM)
 *
 * Errors are events too ({"event":"error",...}); stderr carries only libbpf's
 * own warnings.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "loader.h"
#include "collect.h"
#include "series.h"
#include "objects.h"
#include "futex.h"
#include "tasks.h"
#include "kmem.h"
#include "gomutex.h"
#include "usdt.h"
#include "filelocks.h"
#include "jvmmon.h"
#include "commands.h"
#include "contention.skel.h"

/* {"event": event, "pid": pid} */
static void emit_pid_event(const char *event, __u32 pid)
{
	struct jw out;

	jw_event_begin(&out, stdout, event);
	jw_ku64(&out, "pid", pid);
	jw_event_end(&out);
}

/* the process id argument of cmd; false (and an error event) if it is none */
static bool parse_pid(const char *cmd, const char *arg, __u32 *tgid)
{
	char *end;
	long pid = strtol(arg, &end, 10);

	if (*arg == '\0' || *end != '\0' || pid <= 0 || pid > 0x3fffffff) {
		emit_error(cmd, EINVAL, "%s: not a process id: '%s'", cmd, arg);
		return false;
	}
	*tgid = (__u32)pid;
	return true;
}

static void cmd_track(struct probe *p, const char *arg)
{
	__u32 tgid;
	__u8 one = 1;
	char proc[64];
	struct stat st;

	if (!parse_pid("track", arg, &tgid))
		return;
	snprintf(proc, sizeof(proc), "/proc/%u", tgid);
	if (stat(proc, &st)) {
		emit_error("track", errno, "track: no process %u", tgid);
		return;
	}
	if (bpf_map_update_elem(bpf_map__fd(p->cskel->maps.tracked), &tgid, &one, BPF_ANY)) {
		emit_error("track", errno, "track: filter map update failed: %s", strerror(errno));
		return;
	}
	emit_pid_event("tracked", tgid);
}

static void cmd_untrack(struct probe *p, const char *arg)
{
	__u32 tgid;

	if (!parse_pid("untrack", arg, &tgid))
		return;
	/* children forked before this keep being tracked */
	bpf_map_delete_elem(bpf_map__fd(p->cskel->maps.tracked), &tgid);
	__atomic_add_fetch(&p->cskel->bss->tracked_epoch, 1, __ATOMIC_SEQ_CST);  /* the CPUs' cached tgid is void */
	emit_pid_event("untracked", tgid);
}

static void cmd_watch(struct probe *p, const char *path)
{
	struct jw out;
	int fd;

	if (p->nwatch >= MAX_WATCH) {
		emit_error("watch", ENOSPC, "watch: more than %d paths", MAX_WATCH);
		return;
	}
	fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		emit_error("watch", errno, "watch: %s: %s", path, strerror(errno));
		return;
	}
	p->watch_fds[p->nwatch++] = fd;
	jw_event_begin(&out, stdout, "watched");
	jw_kstr(&out, "path", path);
	jw_event_end(&out);
}

static void cmd_start(struct probe *p)
{
	struct jw out;

	p->cskel->bss->enabled = false;
	p->cskel->bss->generation++;     /* per-task slots of earlier windows are void */
	collect_clear(p);
	series_reset();
	objects_reset();
	kmem_reset();
	collect_objects(p);
	futex_start();
	gomutex_start();
	gomutex_scan(bpf_map__fd(p->cskel->maps.tracked));
	jvmmon_scan(bpf_map__fd(p->cskel->maps.tracked));   /* JVMs whose monitors are named at EnterI */
	usdt_start();
	filelocks_start();
	p->t_start = now_ns();
	p->cskel->bss->t_start = p->t_start;      /* per-thread times (tasktimes.bpf.h) */
	tasks_start(p->t_start);
	cost_start();
	p->cskel->bss->enabled = true;
	p->enabled = true;
	jw_event_begin(&out, stdout, "started");
	jw_ku64(&out, "t_ns", p->t_start);
	jw_event_end(&out);
}

static void cmd_stop(struct probe *p)
{
	struct jw out;

	if (!p->enabled) {
		emit_error("stop", EINVAL, "stop: not started");
		return;
	}
	p->cskel->bss->enabled = false;
	p->t_stop = now_ns();
	cost_stop();
	p->enabled = false;
	futex_stop(p->t_stop);
	gomutex_stop();
	usdt_stop();
	filelocks_stop(p->t_stop);
	tasks_stop(p->t_stop);
	collect_objects(p);

	jw_event_begin(&out, stdout, "data");
	jw_ku64(&out, "t_start_ns", p->t_start);
	jw_ku64(&out, "t_stop_ns", p->t_stop);
	jw_ku64(&out, "window_ns", p->t_stop - p->t_start);
	jw_ku64(&out, "ncpus", p->ncpus);
	collect_json(p, &out);
	jw_event_end(&out);
}

static void cmd_reset(struct probe *p)
{
	struct jw out;

	p->cskel->bss->enabled = false;
	p->enabled = false;
	if (clear_map(p->cskel->maps.tracked)) {
		emit_error("reset", ENOMEM, "reset: the tracked map could not be cleared");
		return;
	}
	__atomic_add_fetch(&p->cskel->bss->tracked_epoch, 1, __ATOMIC_SEQ_CST);  /* the CPUs' cached tgid is void */
	for (int i = 0; i < p->nwatch; i++)
		close(p->watch_fds[i]);
	p->nwatch = 0;
	jw_event_begin(&out, stdout, "reset");
	jw_event_end(&out);
}

bool handle_line(struct probe *p, char *line)
{
	size_t len = strlen(line);

	while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
		line[--len] = '\0';
	if (strncmp(line, "track ", 6) == 0)
		cmd_track(p, line + 6);
	else if (strncmp(line, "untrack ", 8) == 0)
		cmd_untrack(p, line + 8);
	else if (strncmp(line, "watch ", 6) == 0)
		cmd_watch(p, line + 6);
	else if (strncmp(line, "usdt ", 5) == 0)
		usdt_command(line + 5);
	else if (strcmp(line, "start") == 0)
		cmd_start(p);
	else if (strcmp(line, "stop") == 0)
		cmd_stop(p);
	else if (strcmp(line, "reset") == 0)
		cmd_reset(p);
	else if (strcmp(line, "quit") == 0)
		return false;
	else if (len)
		emit_error("command", EINVAL, "unknown command: '%s'", line);
	return true;
}
