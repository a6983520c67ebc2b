#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <regex.h>
#include <stdio.h>
#include <string.h>

#include "cover.h"
#include "xmalloc.h"

/* Most patterns a node may hold: a notifier's notifier.topics entries. */
#define COVER_PATTERNS_MAX 64

struct cover {
	json_t *node;
	regex_t re[COVER_PATTERNS_MAX];
	size_t nre;
};

char *
cover_default_pattern(const char *prefix)
{
	size_t n = strlen(prefix), len = 1;
	char *out = xmalloc(2 * n + 16);

	out[0] = '^';
	for (size_t i = 0; i < n; i++) {
		if (prefix[i] == '.')
			out[len++] = '\\';
		out[len++] = prefix[i];
	}
	strcpy(out + len, n == 0 ? "[^_].*" : ".*");
	return out;
}

static int
strings(const json_t *a)
{
	size_t i;
	json_t *v;

	if (a == NULL)
		return 1;
	if (!json_is_array(a))
		return 0;
	json_array_foreach (a, i, v)
		if (!json_is_string(v))
			return 0;
	return 1;
}

struct cover *
cover_parse(const char *data, size_t len, char *err, size_t errlen)
{
	json_error_t je;
	json_t *o = json_loadb(data, len, 0, &je), *pats, *v;
	struct cover *c;
	size_t i;

	if (!json_is_object(o) || !strings(json_object_get(o, "topics")) ||
	    !strings(pats = json_object_get(o, "patterns")) ||
	    !strings(json_object_get(o, "excluded")) ||
	    json_array_size(pats) > COVER_PATTERNS_MAX) {
		snprintf(err, errlen, "not a notifier node");
		json_decref(o);
		return NULL;
	}
	c = xcalloc(1, sizeof(*c));
	c->node = o;
	json_array_foreach (pats, i, v) {
		int rc = regcomp(&c->re[c->nre], json_string_value(v),
				 REG_EXTENDED | REG_NOSUB);

		if (rc != 0) {
			snprintf(err, errlen, "pattern '%.100s' is not a regex",
				 json_string_value(v));
			cover_free(c);
			return NULL;
		}
		c->nre++;
	}
	return c;
}

void
cover_free(struct cover *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->nre; i++)
		regfree(&c->re[i]);
	json_decref(c->node);
	xfree(c);
}

static int
listed(const json_t *a, const char *s)
{
	size_t i;
	json_t *v;

	json_array_foreach (a, i, v)
		if (!strcmp(json_string_value(v), s))
			return 1;
	return 0;
}

int
cover_covers(const struct cover *c, const char *ktopic)
{
	if (listed(json_object_get(c->node, "excluded"), ktopic))
		return 0;
	if (listed(json_object_get(c->node, "topics"), ktopic))
		return 1;
	for (size_t i = 0; i < c->nre; i++)
		if (regexec(&c->re[i], ktopic, 0, NULL, 0) == 0)
			return 1;
	return 0;
}

const json_t *
cover_json(const struct cover *c)
{
	return c->node;
}
