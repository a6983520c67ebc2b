#ifndef PROPHET_UTF8_H
#define PROPHET_UTF8_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/*
 * Text from outside (request lines, names, header values, node data) made
 * fit for JSON: jansson refuses strings that are not valid UTF-8, so every
 * such string goes through here. Invalid bytes become U+FFFD, a copy into a
 * fixed buffer never ends in the middle of a character, and nothing here
 * returns NULL.
 */

#define UTF8_REPLACEMENT "\xef\xbf\xbd"

/* Bytes of the next valid character at s (1-4), or 0 if s[0] starts none
 * (n > 0). NUL is a valid character here. */
size_t utf8_char_len(const char *s, size_t n);
/* Whether s[0..n) is valid UTF-8 (NUL bytes allowed). */
int utf8_valid(const char *s, size_t n);
/* The UTF-8 bytes of code point cp (below 0x110000, not a surrogate) into
 * out (room for 4); their count. */
size_t utf8_encode(char *out, uint32_t cp);
/*
 * A JSON \u escape at p (at the 'u'; end: where the text ends): its code
 * point in *cp, a surrogate pair joined into one; the length of its text
 * after the backslash (5, or 11 for a pair), or 0 if it is not a valid
 * one (bad hex digits, a lone or reversed surrogate, cut short).
 */
size_t utf8_json_escape(const char *p, const char *end, uint32_t *cp);

/* A JSON string's text between its quotes, as utf8_json_scan found it. */
struct utf8_json_span {
	const char *p;
	size_t len;
	int esc; /* has escapes to undo */
	int nul; /* one of them is \u0000 */
};
/*
 * Reads the JSON string whose opening quote is just before p (end: where
 * the text ends) as jansson does: strict UTF-8, no control characters,
 * only RFC 8259's escapes, surrogates in pairs. Returns the byte after
 * the closing quote with *sp filled, or NULL if it is not a string.
 */
const char *utf8_json_scan(const char *p, const char *end,
			   struct utf8_json_span *sp);
/* Writes the value of a span utf8_json_scan accepted (at most sp->len
 * bytes) and a NUL to o; returns the value's length. */
size_t utf8_json_unescape(const struct utf8_json_span *sp, char *o);
/* The value of such a span in a new NUL-terminated string (the caller's);
 * its length in *lenp unless lenp is NULL. */
char *utf8_json_dup(const struct utf8_json_span *sp, size_t *lenp);
/*
 * Copies s[0..n) into dst (cap >= 1 bytes with its NUL): invalid bytes and
 * NUL bytes become U+FFFD; stops before a character that does not fit.
 * Returns the length written.
 */
size_t utf8_copy(char *dst, size_t cap, const char *s, size_t n);
/* vsnprintf into dst, then made valid as by utf8_copy. */
void utf8_vformat(char *dst, size_t cap, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
void utf8_format(char *dst, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A JSON string of s[0..n) (NUL bytes kept, invalid bytes U+FFFD); never
 * NULL. s NULL gives "". */
json_t *utf8_json(const char *s, size_t n);
/* utf8_json of a NUL-terminated string. */
json_t *utf8_json_str(const char *s);

#endif
