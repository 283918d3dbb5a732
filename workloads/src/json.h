/* Tiny streaming JSON writer into a growable buffer (one document = one
 * line of JSON Lines output). Commas are inserted automatically. */
#ifndef LS_JSON_H
#define LS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LS_JSON_MAX_DEPTH 32

struct json {
	char *buf;
	size_t len, cap;
	int depth;
	bool has_elem[LS_JSON_MAX_DEPTH + 1]; /* element already written at depth */
	bool after_key;
};

void json_init(struct json *j);
void json_free(struct json *j);
void json_reset(struct json *j);

void json_obj_begin(struct json *j);
void json_obj_end(struct json *j);
void json_arr_begin(struct json *j);
void json_arr_end(struct json *j);
void json_key(struct json *j, const char *key);

void json_str(struct json *j, const char *s); /* NULL -> null */
void json_int(struct json *j, long long v);
void json_uint(struct json *j, unsigned long long v);
void json_double(struct json *j, double v); /* non-finite -> null */
void json_bool(struct json *j, bool v);
void json_null(struct json *j);

/* Convenience: key + value. */
void json_kstr(struct json *j, const char *k, const char *s);
void json_kint(struct json *j, const char *k, long long v);
void json_kuint(struct json *j, const char *k, unsigned long long v);
void json_kdouble(struct json *j, const char *k, double v);
void json_kbool(struct json *j, const char *k, bool v);

/* Append '\n' and write the document to fd in one go. 0 or -1/errno. */
int json_emit_line(struct json *j, int fd);

#endif
