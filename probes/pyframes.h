/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_PYFRAMES_H
#define LOCKSCOPE_PYFRAMES_H

struct jw;

/* the py_procs, py_stacks and py_waits maps of tasks.bpf.c (pyframes.bpf.h) */
void pyframes_set_maps(int procs_fd, int stacks_fd, int waits_fd);
/* every tick: find the CPython interpreters of tracked processes not looked at yet */
void pyframes_scan(int tracked_fd);
/* every tick and at stop: read the names of the new stacks' code objects */
void pyframes_resolve(void);
/* at start: forget the stacks of the last window */
void pyframes_clear(void);
/* "python_processes", "py_stacks" and "py_waits" keys of the data event */
void pyframes_json(struct jw *w);
void pyframes_destroy(void);

#endif
