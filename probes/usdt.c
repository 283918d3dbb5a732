// SPDX-License-Identifier: MIT
/* Loader side of usdt.bpf.c: load once, attach its two programs to the USDT
 * probes the orchestrator names (lockscope/usdtprobe.py reads the probe
 * table, analyzer/user/usdt.toml, and matches it to the tracked processes'
 * executables), clear at start, emit the waits at stop. libbpf's USDT
 * support reads the probes' argument specs from the ELF notes and bumps
 * their semaphores (ref_ctr_offset) while attached. A program's exported
 * "wait begins"/"wait ends" functions (provider "-") get entry uprobes
 * instead, by symbol name (NAME may list alternatives, A,B: the first the
 * binary has), and a wait done when its start function returns a return
 * probe ("return"). A start whose cookie names an ObjectMonitor (bit 13)
 * has jvmmon.c look for the JVMs that map its libjvm.so. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "usdt.h"
#include "jvmmon.h"
#include "usdt.skel.h"

#define MAX_USDT_LINKS 64

static const char *ucounter_names[UCNT__MAX] = { USDT_COUNTERS(COUNTER_NAME) };

struct usdt_link {
	struct bpf_link *link;
	char what[16];        /* start | done | return */
	__u64 cookie;
	char provider[64], name[128], path[256];
};

static struct usdt_bpf *uskel;
static int load_err = -ENOENT;
static int nc, tracked_map_fd = -1;
static struct usdt_link links[MAX_USDT_LINKS];
static int nlinks;

static void (*attached_hook)(void);

int usdt_load(bool system_wide, int tracked_fd, int waiting_fd, int ncpus, void (*on_attach)(void))
{
	int err;

	nc = ncpus;
	tracked_map_fd = tracked_fd;
	attached_hook = on_attach;
	uskel = usdt_bpf__open();
	if (!uskel)
		return load_err = -errno;
	uskel->rodata->system_wide = system_wide;
	err = bpf_map__reuse_fd(uskel->maps.tracked, tracked_fd);
	if (!err)    /* contention.bpf.c's: the waits' holders and waiters (usdtwait.bpf.h) */
		err = bpf_map__reuse_fd(uskel->maps.usdt_waiting, waiting_fd);
	if (!err)
		err = usdt_bpf__load(uskel);
	if (!err)
		jvmmon_set_maps(bpf_map__fd(uskel->maps.jvm_procs), bpf_map__fd(uskel->maps.jvm_threads));
	if (err) {
		usdt_bpf__destroy(uskel);
		uskel = NULL;
	} else {
		cost_register(uskel->obj);
	}
	return load_err = err;
}

static void emit_attached(const struct usdt_link *l)
{
	struct jw out;

	jw_event_begin(&out, stdout, "usdt_attached");
	jw_kstr(&out, "probe", l->what);
	jw_kstr(&out, "provider", l->provider);
	jw_kstr(&out, "name", l->name);
	jw_kstr(&out, "path", l->path);
	jw_event_end(&out);
}

/* a start or done probe: a USDT probe (PROVIDER:NAME), or with PROVIDER
 * "-" the entry of the exported function NAME (the first of NAME's
 * comma-separated alternatives the binary has), or its return ("return") */
static struct bpf_link *attach_one(struct usdt_link *l)
{
	bool start = strcmp(l->what, "start") == 0;

	if (strcmp(l->provider, "-") == 0) {
		char names[sizeof(l->name)], *save = NULL;
		struct bpf_link *link = NULL;

		snprintf(names, sizeof(names), "%s", l->name);
		for (char *fn = strtok_r(names, ",", &save); fn && !link; fn = strtok_r(NULL, ",", &save)) {
			LIBBPF_OPTS(bpf_uprobe_opts, uopts, .func_name = fn, .bpf_cookie = l->cookie,
				    .retprobe = strcmp(l->what, "return") == 0);

			link = bpf_program__attach_uprobe_opts(start ? uskel->progs.lksc_func_start
								     : uskel->progs.lksc_func_done,
							       -1, l->path, 0, &uopts);
		}
		return link;
	}
	LIBBPF_OPTS(bpf_usdt_opts, opts, .usdt_cookie = l->cookie);
	return bpf_program__attach_usdt(start ? uskel->progs.lksc_usdt_start : uskel->progs.lksc_usdt_done,
					-1, l->path, l->provider, l->name, &opts);
}

/* `usdt suffix ENTRY I TEXT`: suffix I of the names entry ENTRY counts
 * (a start whose cookie has bit 15 is a wait only for those) */
static void suffix_command(const char *args)
{
	struct usdt_suffix x = {};
	unsigned int entry, i;
	char text[USDT_NAME_LEN];
	__u32 key;
	struct jw out;

	if (sscanf(args, "%u %u %103s", &entry, &i, text) != 3 || entry > 255 || i >= USDT_SUFFIXES) {
		emit_error("usdt", EINVAL, "usdt: expected 'suffix ENTRY 0..%d TEXT': '%s'", USDT_SUFFIXES - 1, args);
		return;
	}
	x.len = strlen(text);
	memcpy(x.s, text, x.len);
	key = entry * USDT_SUFFIXES + i;
	if (bpf_map_update_elem(bpf_map__fd(uskel->maps.usdt_suffixes), &key, &x, BPF_ANY)) {
		emit_error("usdt", errno, "usdt: suffix %u of entry %u: %s", i, entry, strerror(errno));
		return;
	}
	jw_event_begin(&out, stdout, "usdt_suffix");
	jw_ku64(&out, "entry", entry);
	jw_kstr(&out, "suffix", text);
	jw_event_end(&out);
}

void usdt_command(char *args)
{
	char what[16], provider[64], name[128];
	unsigned long long cookie;
	int off = 0;
	struct usdt_link *l;

	if (!uskel) {
		emit_error("usdt", -load_err, "usdt: the USDT program did not load: %s", strerror(-load_err));
		return;
	}
	if (strncmp(args, "suffix ", 7) == 0) {
		suffix_command(args + 7);
		return;
	}
	if (sscanf(args, "%15s %llu %63s %127s %n", what, &cookie, provider, name, &off) != 4 || !off ||
	    !args[off] || (strcmp(what, "start") && strcmp(what, "done") && strcmp(what, "return")) ||
	    (!strcmp(what, "return") && strcmp(provider, "-"))) {
		emit_error("usdt", EINVAL, "usdt: expected 'start|done COOKIE PROVIDER|- NAME PATH' or "
			   "'return COOKIE - NAME PATH': '%s'", args);
		return;
	}
	if (nlinks >= MAX_USDT_LINKS) {
		emit_error("usdt", ENOSPC, "usdt: more than %d probes", MAX_USDT_LINKS);
		return;
	}
	l = &links[nlinks];
	memset(l, 0, sizeof(*l));
	snprintf(l->what, sizeof(l->what), "%s", what);
	snprintf(l->provider, sizeof(l->provider), "%s", provider);
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->path, sizeof(l->path), "%s", args + off);
	l->cookie = cookie;
	l->link = attach_one(l);
	if (!l->link) {
		int err = errno;

		if (strcmp(provider, "-") == 0)
			emit_error("usdt", err, "usdt: cannot attach %s uprobe to %s of %s: %s",
				   strcmp(what, "return") ? "an entry" : "a return", name, l->path, strerror(err));
		else
			emit_error("usdt", err, "usdt: cannot attach %s:%s of %s: %s", provider, name, l->path,
				   strerror(err));
		return;
	}
	nlinks++;
	if (!strcmp(what, "start") && (cookie & (3ULL << 13))) {   /* names HotSpot monitors or parks */
		jvmmon_watch(l->path);
		jvmmon_scan(tracked_map_fd);   /* now, not at the next tick: enters until then go unnamed */
	}
	if (attached_hook)
		attached_hook();
	emit_attached(l);
}

void usdt_start(void)
{
	if (!uskel)
		return;
	uskel->bss->enabled = false;
	clear_map(uskel->maps.usdt_open);
	clear_map(uskel->maps.usdt_stats);
	clear_map(uskel->maps.usdt_stacks);
	counters_zero(uskel->maps.usdt_counters, UCNT__MAX, nc);
	uskel->bss->enabled = true;
}

void usdt_stop(void)
{
	if (uskel)
		uskel->bss->enabled = false;
}

struct emit_ctx {
	struct jw *w;
	unsigned int n;
};

/* a row of "usdt": the waits of one usdt_stat_key, its name made a string */
struct usdt_wait_row {
	const struct usdt_stat_key *k;
	const struct wait_stat *s;
	char name[USDT_NAME_LEN + 1];
};

static void emit_wait(const void *key, const struct wait_stat *s, void *ctx)
{
	struct usdt_wait_row r = { .k = key, .s = s };
	struct emit_ctx *c = ctx;

	memcpy(r.name, r.k->key.name, USDT_NAME_LEN);
	r.name[USDT_NAME_LEN] = '\0';
	EMIT_ROW_USDT(c->w, &r);
	c->n++;
}

static unsigned int nwaits, nstacks;

/* rows of "usdt_stacks" and "jvm_methods": a map's key and value */
struct jvm_stack_row {
	const __u64 *id;
	const struct usdt_stack *st;
};

struct jvm_method_row {
	const struct jvm_method_key *k;
	const struct jvm_method *m;
};

/* "usdt_stacks": the call paths of JVM waits (return addresses, or an
 * interpreted frame's Method * with JVM_METHOD_FRAME set); "jvm_methods":
 * the names of those methods */
static void emit_jvm_stacks(struct jw *w)
{
	int fd = bpf_map__fd(uskel->maps.usdt_stacks);
	struct jvm_method_key mk, *mprev = NULL;
	__u64 id, *prev = NULL;
	struct usdt_stack st;
	struct jvm_method m;
	struct jvm_stack_row r = { .id = &id, .st = &st };
	struct jvm_method_row mr = { .k = &mk, .m = &m };

	jw_key(w, "usdt_stacks");
	jw_arr(w);
	nstacks = 0;
	while (bpf_map_get_next_key(fd, prev, &id) == 0) {
		prev = &id;
		if (bpf_map_lookup_elem(fd, &id, &st))
			continue;
		EMIT_ROW_USDT_STACKS(w, &r);
		nstacks++;
	}
	jw_arr_end(w);
	fd = bpf_map__fd(uskel->maps.jvm_methods);
	jw_key(w, "jvm_methods");
	jw_arr(w);
	while (bpf_map_get_next_key(fd, mprev, &mk) == 0) {
		mprev = &mk;
		if (bpf_map_lookup_elem(fd, &mk, &m))
			continue;
		m.cls[sizeof(m.cls) - 1] = m.name[sizeof(m.name) - 1] = '\0';
		EMIT_ROW_JVM_METHODS(w, &mr);
	}
	jw_arr_end(w);
}

void usdt_json(struct jw *w)
{
	struct emit_ctx c = { .w = w };

	jw_key(w, "usdt_probe");
	jw_obj(w);
	jw_kbool(w, "loaded", uskel != NULL);
	if (!uskel)
		jw_kstr(w, "reason", strerror(-load_err));
	jw_key(w, "attached");
	jw_arr(w);
	for (int i = 0; i < nlinks; i++)
		EMIT_ROW_USDT_PROBE_ATTACHED(w, &links[i]);
	jw_arr_end(w);
	jvmmon_json(w);
	jw_obj_end(w);
	if (!uskel)
		return;
	jw_key(w, "usdt");
	jw_arr(w);
	for_each_wait(bpf_map__fd(uskel->maps.usdt_stats), nc, emit_wait, &c);
	jw_arr_end(w);
	nwaits = c.n;
	emit_jvm_stacks(w);
}

void usdt_counters_json(struct jw *w)
{
	__u64 sums[UCNT__MAX];

	if (!uskel)
		return;
	counters_read(uskel->maps.usdt_counters, UCNT__MAX, nc, sums);
	for (__u32 i = 0; i < UCNT__MAX; i++)
		jw_ku64(w, ucounter_names[i], sums[i]);
}

void usdt_map_use_json(struct jw *w)
{
	if (uskel) {
		emit_map_use(w, "usdt_stats", uskel->maps.usdt_stats, nwaits);
		emit_map_use(w, "usdt_stacks", uskel->maps.usdt_stacks, nstacks);
	}
}

void usdt_destroy(void)
{
	for (int i = 0; i < nlinks; i++)
		bpf_link__destroy(links[i].link);
	nlinks = 0;
	jvmmon_destroy();
	if (uskel)
		cost_unregister(uskel->obj);
	usdt_bpf__destroy(uskel);
	uskel = NULL;
}
