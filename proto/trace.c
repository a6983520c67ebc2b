#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "trace.h"

static int
lower_hex(const char *s, size_t n, int *all_zero)
{
	*all_zero = 1;
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
		if (s[i] != '0')
			*all_zero = 0;
	}
	return 1;
}

const char *
trace_parent_invalid(const char *s, size_t len)
{
	int zero;

	if (len != TRACE_PARENT_LEN)
		return "must be 55 characters: "
		       "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>";
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return "must be 00-<32 hex trace-id>-<16 hex parent-id>-"
		       "<2 hex flags>";
	if (!lower_hex(s, 2, &zero) || !lower_hex(s + 3, 32, &zero) ||
	    !lower_hex(s + 53, 2, &zero))
		return "must be lowercase hex digits and dashes";
	if (s[0] != '0' || s[1] != '0')
		return "only version 00 is supported";
	lower_hex(s + 3, 32, &zero);
	if (zero)
		return "has an all-zero trace-id";
	if (!lower_hex(s + 36, 16, &zero))
		return "must be lowercase hex digits and dashes";
	if (zero)
		return "has an all-zero parent-id";
	return NULL;
}

static int
key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
	       c == '-' || c == '*' || c == '/';
}

/* simple-key, or tenant-id "@" system-id. */
static const char *
state_key_invalid(const char *k, size_t n)
{
	const char *at = memchr(k, '@', n);

	if (n == 0)
		return "has a list-member without a key";
	for (size_t i = 0; i < n; i++)
		if (k + i != at && !key_char(k[i]))
			return "has a key outside [a-z0-9_*/@-]";
	if (at == NULL) {
		if (n > 256 || !(k[0] >= 'a' && k[0] <= 'z'))
			return "has a key that does not start with a-z or is "
			       "longer than 256";
		return NULL;
	}
	if (memchr(at + 1, '@', n - (size_t)(at - k) - 1) != NULL)
		return "has a key with two '@'";
	if (at == k || at - k > 241 ||
	    !((k[0] >= 'a' && k[0] <= 'z') || (k[0] >= '0' && k[0] <= '9')))
		return "has a tenant-id (before '@') that is empty, longer "
		       "than 241 or not starting with a-z0-9";
	if (n - (size_t)(at - k) - 1 < 1 || n - (size_t)(at - k) - 1 > 14 ||
	    !(at[1] >= 'a' && at[1] <= 'z'))
		return "has a system-id (after '@') that is not 1-14 "
		       "characters starting with a-z";
	return NULL;
}

static const char *
state_value_invalid(const char *v, size_t n)
{
	if (n == 0 || n > 256)
		return "has a value that is empty or longer than 256";
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];

		if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
			return "has a value with a character outside "
			       "printable ASCII or ',' or '='";
	}
	if (v[n - 1] == ' ')
		return "has a value ending in a space";
	return NULL;
}

const char *
trace_state_invalid(const char *s, size_t len)
{
	const char *keys[TRACE_STATE_MEMBERS_MAX];
	size_t klen[TRACE_STATE_MEMBERS_MAX], nm = 0, i = 0;

	if (len > TRACE_STATE_MAX)
		return "is longer than 512 characters";
	if (strlen(s) != len)
		return "has a NUL byte";
	while (i <= len) {
		size_t b = i, e, eq;
		const char *why;

		while (i < len && s[i] != ',')
			i++;
		e = i++;
		/* optional whitespace around the member */
		while (b < e && (s[b] == ' ' || s[b] == '\t'))
			b++;
		while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t'))
			e--;
		if (b == e)
			continue; /* empty members are allowed */
		if (nm == TRACE_STATE_MEMBERS_MAX)
			return "has more than 32 list-members";
		for (eq = b; eq < e && s[eq] != '='; eq++)
			;
		if (eq == e)
			return "has a list-member without '=' (key=value)";
		if ((why = state_key_invalid(s + b, eq - b)) != NULL ||
		    (why = state_value_invalid(s + eq + 1, e - eq - 1)) != NULL)
			return why;
		for (size_t j = 0; j < nm; j++)
			if (klen[j] == eq - b &&
			    !memcmp(keys[j], s + b, eq - b))
				return "has a key twice";
		keys[nm] = s + b;
		klen[nm++] = eq - b;
	}
	return NULL;
}

const char *
trace_kv_parent(char *buf, size_t len, const char *tp)
{
	if (tp == NULL || strlen(tp) != TRACE_PARENT_LEN) {
		if (len > 0)
			buf[0] = '\0';
		return buf;
	}
	snprintf(buf, len, " trace=%.*s", TRACE_ID_LEN, tp + 3);
	return buf;
}

const char *
trace_kv(char *buf, size_t len, const json_t *headers)
{
	const json_t *v =
		headers != NULL ? json_object_get(headers, TRACE_PARENT) : NULL;

	return trace_kv_parent(buf, len, json_string_value(v));
}

static int
has_own(const json_t *task, const char *name)
{
	const json_t *h = json_object_get(task, "headers");
	const char *k;
	json_t *v;

	if (json_object_get(task, name) != NULL)
		return 1;
	if (json_is_object(h))
		json_object_foreach ((json_t *)h, k, v)
			if (!strcasecmp(k, name))
				return 1;
	return 0;
}

void
trace_default(json_t *task, const char *tp, const char *ts)
{
	/* nocheck: bytes that are not UTF-8 get the validator's 400 */
	if ((tp == NULL && ts == NULL) || !json_is_object(task) ||
	    has_own(task, TRACE_PARENT) || has_own(task, TRACE_STATE))
		return;
	if (tp != NULL)
		json_object_set_new(task, TRACE_PARENT,
				    json_string_nocheck(tp));
	if (ts != NULL)
		json_object_set_new(task, TRACE_STATE, json_string_nocheck(ts));
}
