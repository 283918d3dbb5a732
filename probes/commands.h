/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_COMMANDS_H
#define LOCKSCOPE_COMMANDS_H

#include <stdbool.h>

struct probe;

/* one command line from stdin (the trailing newline removed); false to quit */
bool handle_line(struct probe *p, char *line);

#endif
