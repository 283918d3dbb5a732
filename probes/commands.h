/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_COMMANDS_H
#define LOCKSCOPE_COMMANDS_H

#include <stdbool.h>

struct probe;

/* one command line from stdin (the trailing newline removed); false to quit */
bool handle_line(struct probe *p, char *line);
/* an {"event":"error"} line: the stage, errno (either sign) and a message */
void emit_error(const char *stage, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
