/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_JVMMON_H
#define LOCKSCOPE_JVMMON_H

struct jw;

/* usdt.bpf.c's jvm_procs and jvm_threads maps */
void jvmmon_set_maps(int procs_fd, int threads_fd);
/* a libjvm.so whose ObjectMonitor::EnterI (or enter_internal) has usdt.bpf.c's
 * start program: the tracked processes that map it are looked at */
void jvmmon_watch(const char *path);
/* every tick: read the layout of the JVMs of tracked processes not looked at
 * yet, and the threads of those read */
void jvmmon_scan(int tracked_fd);
/* "jvms": each JVM looked at: its libjvm.so, and why its monitors are not
 * named at EnterI ("" where they are) */
void jvmmon_json(struct jw *w);
void jvmmon_destroy(void);

#endif
