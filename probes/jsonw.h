/* SPDX-License-Identifier: MIT */
/* A minimal JSON writer: enough for flat events and arrays of records. The
 * caller emits keys and values in order; commas are inserted automatically. */
#ifndef LOCKSCOPE_JSONW_H
#define LOCKSCOPE_JSONW_H

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>

struct jw {
	FILE *f;
	int depth;
	bool need_comma[32];
};

static inline void jw_sep(struct jw *w)
{
	if (w->need_comma[w->depth])
		fputc(',', w->f);
	w->need_comma[w->depth] = true;
}

static inline void jw_str_raw(struct jw *w, const char *s)
{
	fputc('"', w->f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", w->f); break;
		case '\\': fputs("\\\\", w->f); break;
		case '\n': fputs("\\n", w->f); break;
		case '\t': fputs("\\t", w->f); break;
		case '\r': fputs("\\r", w->f); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(w->f, "\\u%04x", *p);
			else
				fputc(*p, w->f);
		}
	}
	fputc('"', w->f);
}

static inline void jw_open(struct jw *w, char c)
{
	fputc(c, w->f);
	w->need_comma[++w->depth] = false;
}

static inline void jw_close(struct jw *w, char c)
{
	fputc(c, w->f);
	w->depth--;
}

static inline void jw_key(struct jw *w, const char *k)
{
	jw_sep(w);
	jw_str_raw(w, k);
	fputc(':', w->f);
	/* the value that follows must not add a comma */
	w->need_comma[w->depth] = false;
}

static inline void jw_obj(struct jw *w) { jw_sep(w); jw_open(w, '{'); }
static inline void jw_obj_end(struct jw *w) { jw_close(w, '}'); w->need_comma[w->depth] = true; }
static inline void jw_arr(struct jw *w) { jw_sep(w); jw_open(w, '['); }
static inline void jw_arr_end(struct jw *w) { jw_close(w, ']'); w->need_comma[w->depth] = true; }

static inline void jw_string(struct jw *w, const char *s) { jw_sep(w); jw_str_raw(w, s); }
static inline void jw_u64(struct jw *w, uint64_t v) { jw_sep(w); fprintf(w->f, "%llu", (unsigned long long)v); }
static inline void jw_i64(struct jw *w, int64_t v) { jw_sep(w); fprintf(w->f, "%lld", (long long)v); }
static inline void jw_bool(struct jw *w, bool v) { jw_sep(w); fputs(v ? "true" : "false", w->f); }
static inline void jw_hex(struct jw *w, uint64_t v) { jw_sep(w); fprintf(w->f, "\"0x%llx\"", (unsigned long long)v); }

static inline void jw_null(struct jw *w) { jw_sep(w); fputs("null", w->f); }

/* %.12g; not finite (NaN, inf) -> null */
static inline void jw_double(struct jw *w, double v)
{
	jw_sep(w);
	if (isfinite(v))
		fprintf(w->f, "%.12g", v);
	else
		fputs("null", w->f);
}

/* Length of the valid UTF-8 sequence at s, or 0 where the bytes there are
 * not valid UTF-8 (overlong, surrogate, above U+10FFFF, cut short). */
static inline size_t jw_utf8_len(const unsigned char *s)
{
	size_t len;
	unsigned int min, cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* A string from outside the program (a path, a message) as valid JSON
 * text: bytes that are not UTF-8 become \ufffd, control characters their
 * short escape (\b \f \n \r \t) or \u00XX; NULL is written as null. */
static inline void jw_utf8(struct jw *w, const char *s)
{
	static const char short_esc[0x20] = {
		['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
	};
	const unsigned char *p = (const unsigned char *)s;

	if (!s) {
		jw_null(w);
		return;
	}
	jw_sep(w);
	fputc('"', w->f);
	while (*p) {
		size_t n = jw_utf8_len(p);

		if (n == 0)
			fputs("\\ufffd", w->f);
		else if (*p == '"' || *p == '\\')
			fprintf(w->f, "\\%c", *p);
		else if (*p < 0x20 && short_esc[*p])
			fprintf(w->f, "\\%c", short_esc[*p]);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(w->f, "\\u%04x", *p);
		else
			fwrite(p, 1, n, w->f);
		p += n ? n : 1;
	}
	fputc('"', w->f);
}

/* key + value shorthands */
/* an array of n addresses, "0x..." each */
static inline void jw_hexes(struct jw *w, const __u64 *v, unsigned int n)
{
	jw_arr(w);
	for (unsigned int i = 0; i < n; i++)
		jw_hex(w, v[i]);
	jw_arr_end(w);
}

static inline void jw_kstr(struct jw *w, const char *k, const char *v) { jw_key(w, k); jw_string(w, v); }
static inline void jw_ku64(struct jw *w, const char *k, uint64_t v) { jw_key(w, k); jw_u64(w, v); }
static inline void jw_ki64(struct jw *w, const char *k, int64_t v) { jw_key(w, k); jw_i64(w, v); }
static inline void jw_kbool(struct jw *w, const char *k, bool v) { jw_key(w, k); jw_bool(w, v); }
static inline void jw_khex(struct jw *w, const char *k, uint64_t v) { jw_key(w, k); jw_hex(w, v); }
static inline void jw_knull(struct jw *w, const char *k) { jw_key(w, k); jw_null(w); }
static inline void jw_kdouble(struct jw *w, const char *k, double v) { jw_key(w, k); jw_double(w, v); }
static inline void jw_kutf8(struct jw *w, const char *k, const char *v) { jw_key(w, k); jw_utf8(w, v); }

/* bytes as a string of hex digits ("48c7c7..."): a text object's head, a
 * user stack's top (2 KiB) */
static inline void jw_kbytes(struct jw *w, const char *k, const uint8_t *b, unsigned int n)
{
	static const char digits[] = "0123456789abcdef";

	jw_key(w, k);
	jw_sep(w);
	fputc('"', w->f);
	for (unsigned int i = 0; i < n; i++) {
		fputc(digits[b[i] >> 4], w->f);
		fputc(digits[b[i] & 15], w->f);
	}
	fputc('"', w->f);
}

/* one event per line */
static inline void jw_event_begin(struct jw *w, FILE *f, const char *event)
{
	w->f = f;
	w->depth = 0;
	w->need_comma[0] = false;
	jw_obj(w);
	jw_kstr(w, "event", event);
}

static inline void jw_event_end(struct jw *w)
{
	jw_obj_end(w);
	fputc('\n', w->f);
	fflush(w->f);
}

#endif
