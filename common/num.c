#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <string.h>

#include "num.h"

/* "00" to "99": two digits a division (a 13-digit time in 7). */
static const char digit_pairs[] = "00010203040506070809"
				  "10111213141516171819"
				  "20212223242526272829"
				  "30313233343536373839"
				  "40414243444546474849"
				  "50515253545556575859"
				  "60616263646566676869"
				  "70717273747576777879"
				  "80818283848586878889"
				  "90919293949596979899";

size_t
num_format_ll(char *buf, long long v)
{
	char tmp[NUM_LL_MAX];
	/* Negated as unsigned: -LLONG_MIN does not fit a long long. */
	unsigned long long u =
		v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
	size_t n = sizeof(tmp), len = 0;

	while (u >= 100) {
		const char *d = &digit_pairs[(u % 100) * 2];

		u /= 100;
		tmp[--n] = d[1];
		tmp[--n] = d[0];
	}
	if (u >= 10) {
		tmp[--n] = digit_pairs[u * 2 + 1];
		tmp[--n] = digit_pairs[u * 2];
	} else {
		tmp[--n] = (char)('0' + u);
	}
	if (v < 0)
		buf[len++] = '-';
	memcpy(buf + len, tmp + n, sizeof(tmp) - n);
	len += sizeof(tmp) - n;
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
