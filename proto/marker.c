#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "marker.h"

size_t
marker_encode(const struct marker *m, char *buf)
{
	int n = snprintf(buf, MARKER_VALUE_MAX, "1 %lld %lld %d %lld %d",
			 (long long)m->due_at, (long long)m->fired_at,
			 m->attempt, (long long)m->epoch,
			 (m->recurring ? 1 : 0) | (m->misfired ? 2 : 0));

	return n > 0 ? (size_t)n : 0;
}

/* One decimal field and the space after it (none after the last). */
static int
field(const char **p, const char *end, int last, long long *v)
{
	char buf[24], *e;
	size_t n = 0;

	while (*p + n < end && (*p)[n] != ' ')
		n++;
	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, *p, n);
	buf[n] = '\0';
	errno = 0;
	*v = strtoll(buf, &e, 10);
	if (errno != 0 || *e != '\0')
		return -1;
	*p += n;
	if (last)
		return *p == end ? 0 : -1;
	if (*p == end || **p != ' ')
		return -1;
	(*p)++;
	return 0;
}

int
marker_decode(const char *key, size_t keylen, const char *value,
	      size_t valuelen, struct marker *m)
{
	const char *p = value, *end = value + valuelen;
	long long due, fired, attempt, epoch, flags;

	if (key == NULL || keylen == 0 || keylen > TASK_ID_MAX ||
	    memchr(key, '\0', keylen) != NULL || value == NULL ||
	    valuelen < 2 || memcmp(value, "1 ", 2) != 0)
		return -1;
	p += 2;
	if (field(&p, end, 0, &due) < 0 || field(&p, end, 0, &fired) < 0 ||
	    field(&p, end, 0, &attempt) < 0 || field(&p, end, 0, &epoch) < 0 ||
	    field(&p, end, 1, &flags) < 0)
		return -1;
	if (attempt < 0 || attempt > 1000000 || flags < 0 || flags > 3)
		return -1;
	memset(m, 0, sizeof(*m));
	memcpy(m->id, key, keylen);
	m->due_at = due;
	m->fired_at = fired;
	m->attempt = (int)attempt;
	m->epoch = epoch;
	m->recurring = (flags & 1) != 0;
	m->misfired = (flags & 2) != 0;
	return 0;
}

void
marker_kafka_name(char *buf, size_t len, const char *s)
{
	size_t j = 0;

	while (*s == '/')
		s++;
	for (; *s != '\0' && j + 1 < len; s++) {
		char ch = *s;

		if (ch == '/')
			ch = '.';
		else if (!((ch >= 'a' && ch <= 'z') ||
			   (ch >= 'A' && ch <= 'Z') ||
			   (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
			   ch == '-'))
			ch = '_';
		buf[j++] = ch;
	}
	buf[j] = '\0';
}

int
marker_topic(char *buf, size_t len, const char *eos_topic, const char *prefix,
	     const char *root)
{
	char name[256];

	if (eos_topic[0] != '\0')
		return snprintf(buf, len, "%s", eos_topic) < (int)len ? 0 : -1;
	marker_kafka_name(name, sizeof(name), root);
	return snprintf(buf, len, "%s%s.fired", prefix,
			name[0] != '\0' ? name : "prophet") < (int)len
		       ? 0
		       : -1;
}
