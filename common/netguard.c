#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "netguard.h"
#include "xmalloc.h"

/* Every address is kept as 16 bytes: IPv4 as ::ffff:a.b.c.d (so an IPv4
 * CIDR /n is the mapped /96+n). */
struct cidr {
	unsigned char a[16];
	int bits;
};

struct netguard {
	struct cidr *allow;
	size_t nallow;
	struct cidr *block; /* blocked_v6, then blocked_v4 */
	size_t nblock6, nblock4;
};

/* RFC 6890 special-purpose ranges that must not be reached from outside
 * (192.0.0.0/24 holds some clouds' metadata services). */
static const char *const blocked_v4[] = {
	"0.0.0.0/8",	  "10.0.0.0/8",	   "100.64.0.0/10", "127.0.0.0/8",
	"169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",  "192.168.0.0/16",
	"198.18.0.0/15",  "224.0.0.0/4",   "240.0.0.0/4",
};

/* Teredo (2001::/32) and local-use NAT64 (64:ff9b:1::/48) hide an IPv4
 * address that cannot be recovered reliably: refused whole. */
static const char *const blocked_v6[] = {
	"::/128",   "::1/128",	 "64:ff9b:1::/48", "2001::/32",
	"fc00::/7", "fe80::/10", "fec0::/10",	   "ff00::/8",
};

static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0,    0,
					    0, 0, 0, 0, 0xff, 0xff};

static int
cidr_parse(const char *s, size_t n, struct cidr *out)
{
	char buf[64], *slash, *end;
	struct in_addr a4;
	long bits;
	int max;

	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	slash = strchr(buf, '/');
	if (slash != NULL)
		*slash = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, buf, &a4) == 1) {
		memcpy(out->a, v4_mapped, 12);
		memcpy(out->a + 12, &a4, 4);
		max = 32;
	} else if (inet_pton(AF_INET6, buf, out->a) == 1) {
		max = 128;
	} else {
		return -1;
	}
	bits = max;
	if (slash != NULL) {
		if (slash[1] < '0' || slash[1] > '9')
			return -1;
		bits = strtol(slash + 1, &end, 10);
		if (*end != '\0' || bits < 0 || bits > max)
			return -1;
	}
	out->bits = (int)bits + (max == 32 ? 96 : 0);
	/* host bits beyond the prefix are ignored: 10.1.2.3/8 is 10/8 */
	for (int i = out->bits; i < 128; i++)
		out->a[i / 8] &= (unsigned char)~(0x80 >> (i % 8));
	return 0;
}

static int
cidr_match(const struct cidr *c, const unsigned char a[16])
{
	int full = c->bits / 8, rest = c->bits % 8;

	if (memcmp(c->a, a, (size_t)full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	return ((c->a[full] ^ a[full]) & (0xff00 >> rest)) == 0;
}

static int
in_list(const struct cidr *list, size_t n, const unsigned char a[16])
{
	for (size_t i = 0; i < n; i++)
		if (cidr_match(&list[i], a))
			return 1;
	return 0;
}

/*
 * The IPv4 address an IPv6 one leads to, as ::ffff:a.b.c.d (compatible
 * (deprecated), NAT64 or 6to4); 0 if none. Mapped addresses are IPv4
 * already.
 */
static int
embedded_v4(const unsigned char a[16], unsigned char out[16])
{
	static const unsigned char zero[12], nat64[12] = {0, 0x64, 0xff, 0x9b};
	const unsigned char *v4 = NULL;

	if (!memcmp(a, zero, 12) || !memcmp(a, nat64, 12))
		v4 = a + 12;
	else if (a[0] == 0x20 && a[1] == 0x02)
		v4 = a + 2;
	if (v4 == NULL)
		return 0;
	memcpy(out, v4_mapped, 12);
	memcpy(out + 12, v4, 4);
	return 1;
}

/* Allowed by the list (as written: an IPv4 entry does not open its NAT64
 * or 6to4 forms), else refused when in a blocked range, or leading to a
 * blocked IPv4 address. */
static int
allowed(const struct netguard *g, const unsigned char a[16])
{
	unsigned char v4[16];

	if (in_list(g->allow, g->nallow, a))
		return 1;
	if (in_list(g->block, g->nblock6, a))
		return 0;
	if (!memcmp(a, v4_mapped, 12))
		return !in_list(g->block + g->nblock6, g->nblock4, a);
	if (embedded_v4(a, v4) &&
	    in_list(g->block + g->nblock6, g->nblock4, v4))
		return 0;
	return 1;
}

struct netguard *
netguard_create(const char *list, char *err, size_t errlen)
{
	struct netguard *g = xcalloc(1, sizeof(*g));
	const char *p = list;
	size_t n6 = sizeof(blocked_v6) / sizeof(blocked_v6[0]);
	size_t n4 = sizeof(blocked_v4) / sizeof(blocked_v4[0]);

	g->block = xcalloc(n6 + n4, sizeof(*g->block));
	for (size_t i = 0; i < n6 + n4; i++) {
		const char *c = i < n6 ? blocked_v6[i] : blocked_v4[i - n6];

		if (cidr_parse(c, strlen(c), &g->block[i]) < 0)
			abort(); /* the tables above are constants */
	}
	g->nblock6 = n6;
	g->nblock4 = n4;
	while (*p) {
		size_t n;

		while (*p == ',' || *p == ' ' || *p == '\t')
			p++;
		n = strcspn(p, ", \t");
		if (n == 0)
			break;
		g->allow =
			xrealloc(g->allow, (g->nallow + 1) * sizeof(*g->allow));
		if (cidr_parse(p, n, &g->allow[g->nallow]) < 0) {
			snprintf(err, errlen,
				 "'%.*s' is not an address or CIDR (e.g. "
				 "10.1.0.0/16, fd00::/8)",
				 (int)(n < 64 ? n : 64), p);
			netguard_destroy(g);
			return NULL;
		}
		g->nallow++;
		p += n;
	}
	return g;
}

void
netguard_destroy(struct netguard *g)
{
	if (g == NULL)
		return;
	xfree(g->allow);
	xfree(g->block);
	xfree(g);
}

int
netguard_allows(const struct netguard *g, const struct sockaddr *sa,
		size_t salen)
{
	unsigned char a[16];

	if (sa->sa_family == AF_INET && salen >= sizeof(struct sockaddr_in)) {
		memcpy(a, v4_mapped, 12);
		memcpy(a + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6 &&
		   salen >= sizeof(struct sockaddr_in6)) {
		memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	} else {
		return 0; /* unix sockets and the like */
	}
	return allowed(g, a);
}

int
netguard_allows_ip(const struct netguard *g, const char *ip)
{
	unsigned char a[16];
	struct in_addr a4;

	if (inet_pton(AF_INET, ip, &a4) == 1) {
		memcpy(a, v4_mapped, 12);
		memcpy(a + 12, &a4, 4);
	} else if (inet_pton(AF_INET6, ip, a) != 1) {
		return 0;
	}
	return allowed(g, a);
}
