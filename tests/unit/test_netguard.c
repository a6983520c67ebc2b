#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "cfg.h"
#include "netguard.h"

static struct netguard *
guard(const char *allowed)
{
	char err[256] = "";
	struct netguard *g = netguard_create(allowed, err, sizeof(err));

	if (g == NULL)
		fail_msg("'%s' refused: %s", allowed, err);
	return g;
}

static void
expect(const struct netguard *g, const char *const *ips, int want,
       const char *list)
{
	for (int i = 0; ips[i] != NULL; i++)
		if (netguard_allows_ip(g, ips[i]) != want)
			fail_msg("%s is %s with allowed '%s'", ips[i],
				 want ? "refused" : "allowed", list);
}

/* What a callback may never reach by default, in every spelling of the
 * address that ends up on the wire. */
static const char *const internal[] = {
	/* IPv4 */
	"0.0.0.0", "0.1.2.3", "127.0.0.1", "127.255.255.254", "10.0.0.1",
	"10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.0.1",
	"192.168.255.255", "100.64.0.1", "100.127.255.255", "169.254.169.254",
	"169.254.0.1", "192.0.0.192", "198.18.0.1", "198.19.255.255",
	"224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
	/* IPv6 */
	"::", "::1", "fc00::1", "fd12:3456:789a::1", "fe80::1", "febf::1",
	"fec0::1", "ff02::1", "ff05::2",
	/* IPv4 inside IPv6: mapped, compatible, NAT64, 6to4, Teredo */
	"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
	"::127.0.0.1", "::10.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",
	"64:ff9b::c0a8:101", "2002:7f00:1::1",
	"2002:a9fe:a9fe::", "2002:c0a8:101::5", "2001::1",
	"2001:0:4136:e378:8000:63bf:3fff:fdd2", "64:ff9b:1::8.8.8.8", NULL};

static const char *const external[] = {"8.8.8.8",	  "1.1.1.1",
				       "9.255.255.255",	  "11.0.0.0",
				       "172.15.255.255",  "172.32.0.0",
				       "192.167.255.255", "192.169.0.0",
				       "100.63.255.255",  "100.128.0.0",
				       "169.253.255.255", "169.255.0.0",
				       "198.17.255.255",  "198.20.0.0",
				       "192.0.1.1",	  "223.255.255.255",
				       "2606:4700::1111", "2a00:1450:4001::1",
				       "2001:db8::1",	  "2001:1::1",
				       "::ffff:8.8.8.8",  "64:ff9b::808:808",
				       "2002:808:808::1", "fbff::1",
				       "fe00::1",	  NULL};

static void
test_default_blocks_internal(void **state)
{
	struct netguard *g = guard("");

	(void)state;
	expect(g, internal, 0, "");
	expect(g, external, 1, "");
	netguard_destroy(g);
}

static void
test_allow_list(void **state)
{
	static const char *const lo4[] = {"127.0.0.1", "127.0.0.2",
					  "127.255.255.255", "::ffff:127.0.0.1",
					  NULL};
	static const char *const still[] = {
		"::1",	       "10.0.0.1", "169.254.169.254",
		"192.168.0.1", "fe80::1",  NULL};
	static const char *const just2[] = {"127.0.0.2", "::ffff:127.0.0.2",
					    NULL};
	static const char *const not2[] = {"127.0.0.1", "127.0.0.3",
					   "127.0.0.0", NULL};
	static const char *const in9[] = {"10.128.0.1", "10.255.0.1", NULL};
	static const char *const out9[] = {"10.127.255.255", "10.0.0.1", NULL};
	static const char *const v6[] = {"::1", "fd00::1", "fdff::1", NULL};
	static const char *const not6[] = {"fc00::1", "127.0.0.1", NULL};
	struct netguard *g;

	(void)state;
	g = guard("127.0.0.0/8");
	expect(g, lo4, 1, "127.0.0.0/8");
	expect(g, still, 0, "127.0.0.0/8");
	expect(g, external, 1, "127.0.0.0/8");
	netguard_destroy(g);

	/* a bare address is one host */
	g = guard("127.0.0.2");
	expect(g, just2, 1, "127.0.0.2");
	expect(g, not2, 0, "127.0.0.2");
	netguard_destroy(g);
	g = guard(" 127.0.0.2/32 ,");
	expect(g, just2, 1, "127.0.0.2/32");
	expect(g, not2, 0, "127.0.0.2/32");
	netguard_destroy(g);

	/* a prefix that is not a whole byte */
	g = guard("10.128.0.0/9");
	expect(g, in9, 1, "10.128.0.0/9");
	expect(g, out9, 0, "10.128.0.0/9");
	netguard_destroy(g);

	/* host bits beyond the prefix do not matter */
	g = guard("10.200.3.4/8");
	assert_true(netguard_allows_ip(g, "10.0.0.1"));
	netguard_destroy(g);

	g = guard("::1, fd00::/8");
	expect(g, v6, 1, "::1, fd00::/8");
	expect(g, not6, 0, "::1, fd00::/8");
	netguard_destroy(g);

	/* an IPv4 entry opens its mapped form only: NAT64 and 6to4 forms
	 * are listed as such */
	g = guard("10.0.0.0/8");
	assert_true(netguard_allows_ip(g, "::ffff:10.1.2.3"));
	assert_false(netguard_allows_ip(g, "64:ff9b::a00:1"));
	assert_false(netguard_allows_ip(g, "2002:a00:1::1"));
	netguard_destroy(g);
	g = guard("64:ff9b::a00:0/104, 2002:a00::/24");
	assert_true(netguard_allows_ip(g, "64:ff9b::a00:1"));
	assert_true(netguard_allows_ip(g, "2002:a00:1::1"));
	assert_false(netguard_allows_ip(g, "10.0.0.1"));
	assert_false(netguard_allows_ip(g, "64:ff9b::7f00:1"));
	netguard_destroy(g);

	/* everything */
	g = guard("0.0.0.0/0 ::/0");
	expect(g, internal, 1, "0.0.0.0/0 ::/0");
	netguard_destroy(g);
	g = guard("0.0.0.0/0");
	assert_true(netguard_allows_ip(g, "127.0.0.1"));
	assert_false(netguard_allows_ip(g, "::1"));
	netguard_destroy(g);
}

static void
test_bad_lists(void **state)
{
	static const char *const bad[] = {"10.0.0.0/33", "::/129",
					  "abc",	 "10.0.0.0/",
					  "10.0.0.0/x",	 "1.2.3.4/8/9",
					  "10.0.0.0/-1", "999.1.1.1",
					  "10.0.0.0/8;", "127.0.0.1, localhost",
					  "fe80::1%lo",	 "10.0.0.0/+8",
					  NULL};
	char err[256];

	(void)state;
	for (int i = 0; bad[i] != NULL; i++) {
		err[0] = '\0';
		if (netguard_create(bad[i], err, sizeof(err)) != NULL)
			fail_msg("'%s' accepted", bad[i]);
		assert_true(err[0] != '\0');
		assert_int_equal(cfg_check_cidr_list(bad[i], err, sizeof(err)),
				 -1);
	}
	assert_int_equal(cfg_check_cidr_list("", err, sizeof(err)), 0);
	assert_int_equal(
		cfg_check_cidr_list("10.1.0.0/16, fd00::/8", err, sizeof(err)),
		0);
}

/* The form the HTTP client hands over: socket addresses. */
static void
test_sockaddr(void **state)
{
	struct netguard *g = guard("");
	struct sockaddr_in a4;
	struct sockaddr_in6 a6;
	struct sockaddr_un un;

	(void)state;
	memset(&a4, 0, sizeof(a4));
	a4.sin_family = AF_INET;
	inet_pton(AF_INET, "127.0.0.1", &a4.sin_addr);
	assert_false(netguard_allows(g, (struct sockaddr *)&a4, sizeof(a4)));
	inet_pton(AF_INET, "93.184.215.14", &a4.sin_addr);
	assert_true(netguard_allows(g, (struct sockaddr *)&a4, sizeof(a4)));
	/* a short length is not trusted */
	assert_false(netguard_allows(g, (struct sockaddr *)&a4, 4));
	memset(&a6, 0, sizeof(a6));
	a6.sin6_family = AF_INET6;
	inet_pton(AF_INET6, "::ffff:169.254.169.254", &a6.sin6_addr);
	assert_false(netguard_allows(g, (struct sockaddr *)&a6, sizeof(a6)));
	inet_pton(AF_INET6, "2606:4700::1111", &a6.sin6_addr);
	assert_true(netguard_allows(g, (struct sockaddr *)&a6, sizeof(a6)));
	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	assert_false(netguard_allows(g, (struct sockaddr *)&un, sizeof(un)));
	assert_false(netguard_allows_ip(g, "not an address"));
	assert_false(netguard_allows_ip(g, ""));
	netguard_destroy(g);
	netguard_destroy(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_blocks_internal),
		cmocka_unit_test(test_allow_list),
		cmocka_unit_test(test_bad_lists),
		cmocka_unit_test(test_sockaddr),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
