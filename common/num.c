#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>

#include "num.h"

size_t
num_format_ll(char *buf, long long v)
{
	char tmp[NUM_LL_MAX];
	/* Negated as unsigned: -LLONG_MIN does not fit a long long. */
	unsigned long long u =
		v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
	size_t n = 0, len = 0;

	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		buf[len++] = '-';
	while (n > 0)
		buf[len++] = tmp[--n];
	buf[len] = '\0';
	return len;
}

int
num_parse_ll(const char *s, size_t len, long long *v)
{
	unsigned long long u = 0, max = LLONG_MAX;
	size_t i = 0;
	int neg = 0;

	if (len > 0 && s[0] == '-') {
		neg = 1;
		max = (unsigned long long)LLONG_MAX + 1;
		i = 1;
	}
	if (i == len)
		return -1;
	for (; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (d > 9 || u > (max - d) / 10)
			return -1;
		u = u * 10 + d;
	}
	*v = neg ? (long long)(0ULL - u) : (long long)u;
	return 0;
}
