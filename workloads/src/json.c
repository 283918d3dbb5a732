#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void json_init(struct json *j)
{
	memset(j, 0, sizeof(*j));
}

void json_free(struct json *j)
{
	free(j->buf);
	json_init(j);
}

void json_reset(struct json *j)
{
	char *buf = j->buf;
	size_t cap = j->cap;
	json_init(j);
	j->buf = buf;
	j->cap = cap;
}

static void put(struct json *j, const char *s, size_t n)
{
	if (j->len + n + 2 > j->cap) { /* +2: room for "\n" and NUL */
		size_t cap = j->cap ? j->cap : 256;
		while (j->len + n + 2 > cap)
			cap *= 2;
		char *b = realloc(j->buf, cap);
		if (!b) {
			fprintf(stderr, LS_PROG ": error: out of memory\n");
			exit(1);
		}
		j->buf = b;
		j->cap = cap;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

static void putc_(struct json *j, char c)
{
	put(j, &c, 1);
}

/* Called before every value or key: emits the separating comma. */
static void prefix(struct json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->has_elem[j->depth])
		putc_(j, ',');
	j->has_elem[j->depth] = true;
}

static void open_(struct json *j, char c)
{
	prefix(j);
	putc_(j, c);
	if (j->depth < LS_JSON_MAX_DEPTH)
		j->depth++;
	j->has_elem[j->depth] = false;
}

static void close_(struct json *j, char c)
{
	if (j->depth > 0)
		j->depth--;
	putc_(j, c);
}

void json_obj_begin(struct json *j) { open_(j, '{'); }
void json_obj_end(struct json *j) { close_(j, '}'); }
void json_arr_begin(struct json *j) { open_(j, '['); }
void json_arr_end(struct json *j) { close_(j, ']'); }

/* Length of a valid UTF-8 sequence starting at s (n bytes available),
 * or 0 if the bytes there are not valid UTF-8. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	unsigned min, cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2; cp = c & 0x1f; min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3; cp = c & 0x0f; min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4; cp = c & 0x07; min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static void put_string(struct json *j, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t n = strlen(str);
	char esc[8];

	putc_(j, '"');
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			put(j, esc, 2);
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			switch (c) {
			case '\n': put(j, "\\n", 2); break;
			case '\r': put(j, "\\r", 2); break;
			case '\t': put(j, "\\t", 2); break;
			case '\b': put(j, "\\b", 2); break;
			case '\f': put(j, "\\f", 2); break;
			default:
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				put(j, esc, 6);
			}
			i++;
		} else {
			size_t len = utf8_seq(s + i, n - i);
			if (len == 0) {
				/* Not UTF-8 (e.g. a raw byte in a path): U+FFFD. */
				put(j, "\\ufffd", 6);
				i++;
			} else {
				put(j, (const char *)s + i, len);
				i += len;
			}
		}
	}
	putc_(j, '"');
}

void json_key(struct json *j, const char *key)
{
	prefix(j);
	put_string(j, key);
	putc_(j, ':');
	j->after_key = true;
}

void json_str(struct json *j, const char *s)
{
	if (!s) {
		json_null(j);
		return;
	}
	prefix(j);
	put_string(j, s);
}

void json_int(struct json *j, long long v)
{
	char b[32];
	int n = snprintf(b, sizeof(b), "%lld", v);
	prefix(j);
	put(j, b, (size_t)n);
}

void json_uint(struct json *j, unsigned long long v)
{
	char b[32];
	int n = snprintf(b, sizeof(b), "%llu", v);
	prefix(j);
	put(j, b, (size_t)n);
}

void json_double(struct json *j, double v)
{
	char b[40];
	if (!isfinite(v)) {
		json_null(j);
		return;
	}
	int n = snprintf(b, sizeof(b), "%.12g", v);
	prefix(j);
	put(j, b, (size_t)n);
}

void json_bool(struct json *j, bool v)
{
	prefix(j);
	if (v)
		put(j, "true", 4);
	else
		put(j, "false", 5);
}

void json_null(struct json *j)
{
	prefix(j);
	put(j, "null", 4);
}

void json_kstr(struct json *j, const char *k, const char *s) { json_key(j, k); json_str(j, s); }
void json_kint(struct json *j, const char *k, long long v) { json_key(j, k); json_int(j, v); }
void json_kuint(struct json *j, const char *k, unsigned long long v) { json_key(j, k); json_uint(j, v); }
void json_kdouble(struct json *j, const char *k, double v) { json_key(j, k); json_double(j, v); }
void json_kbool(struct json *j, const char *k, bool v) { json_key(j, k); json_bool(j, v); }

int json_emit_line(struct json *j, int fd)
{
	put(j, "\n", 1);
	int rc = ls_write_all(fd, j->buf, j->len);
	j->len--; /* drop the newline again; the document stays reusable */
	j->buf[j->len] = '\0';
	return rc;
}
