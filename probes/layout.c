// SPDX-License-Identifier: MIT
/* Offsets of lock fields inside lock types, from the kernel's BTF, so that
 * the wait_lock of a named rwsem or mutex can be named too. */
#include <stdio.h>
#include <string.h>
#include <bpf/btf.h>
#include "jsonw.h"
#include "layout.h"

static const char *const layout_fields[][2] = {
	{ "rw_semaphore", "wait_lock" },
	{ "mutex", "wait_lock" },
};
#define NFIELDS (sizeof(layout_fields) / sizeof(layout_fields[0]))

static long layout_offsets[NFIELDS];

static long member_offset(const struct btf *btf, const char *type, const char *member)
{
	int id = btf__find_by_name_kind(btf, type, BTF_KIND_STRUCT);
	const struct btf_type *t;
	const struct btf_member *m;

	if (id < 0)
		return -1;
	t = btf__type_by_id(btf, id);
	m = btf_members(t);
	for (int i = 0; i < btf_vlen(t); i++, m++)
		if (strcmp(btf__name_by_offset(btf, m->name_off), member) == 0)
			return (long)(btf_member_bit_offset(t, i) / 8);
	return -1;
}

void layout_read(const struct btf *btf)
{
	for (size_t i = 0; i < NFIELDS; i++)
		layout_offsets[i] = member_offset(btf, layout_fields[i][0], layout_fields[i][1]);
}

void layout_json(struct jw *w)
{
	char key[64];

	jw_key(w, "layout");
	jw_obj(w);
	for (size_t i = 0; i < NFIELDS; i++) {
		if (layout_offsets[i] < 0)
			continue;
		snprintf(key, sizeof(key), "%s.%s", layout_fields[i][0], layout_fields[i][1]);
		jw_ki64(w, key, layout_offsets[i]);
	}
	jw_obj_end(w);
}
